#include "text/added_tokens.h"

#include <algorithm>

#include "text/utf8.h"

namespace gridq::text {

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// Code point ending at byte `end` (exclusive), and its length.
char32_t cp_before(std::string_view s, size_t end, size_t* len) {
  size_t b = end;
  do {
    --b;
  } while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80 && end - b < 4);
  char32_t cp = 0xFFFD;
  const int n = utf8_next(s, b, &cp);
  if (n <= 0 || b + static_cast<size_t>(n) != end) {
    *len = 1;
    return 0xFFFD;
  }
  *len = end - b;
  return cp;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !is_unicode_whitespace(c);  // approximation of Rust's is_alphanumeric for non-ASCII
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (const auto& t : tokens_) {
    if (t.content.empty()) continue;
    add(t.normalized ? normalized_ : raw_, &t);
  }
}

void AddedTokenMatcher::add(Set& s, const AddedToken* t) {
  auto& v = s.by_first_byte[static_cast<unsigned char>(t->content[0])];
  v.push_back(t);
  std::stable_sort(v.begin(), v.end(),
                   [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  s.empty = false;
}

void AddedTokenMatcher::split_with(const Set& s, std::string_view text, size_t begin, size_t end,
                                   std::vector<Segment>& out) {
  if (s.empty) {
    out.push_back({begin, end, -1});
    return;
  }
  size_t start_offset = begin;  // end of the last emitted piece
  size_t i = begin;
  while (i < end) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : s.by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (t->content.size() <= end - i && text.compare(i, t->content.size(), t->content) == 0) {
        hit = t;  // longest first
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t mb = i, me = i + hit->content.size();
    i = me;
    if (hit->single_word) {
      size_t len;
      const bool start_ok = mb == begin || !is_word_char(cp_before(text, mb, &len));
      char32_t nc = 0;
      const bool stop_ok = me == end || utf8_next(text.substr(0, end), me, &nc) <= 0 || !is_word_char(nc);
      if (!start_ok || !stop_ok) continue;
    }
    if (hit->lstrip) {
      size_t nb = mb;
      while (nb > begin) {
        size_t len;
        if (!is_unicode_whitespace(cp_before(text, nb, &len))) break;
        nb -= len;
      }
      mb = std::max(nb, start_offset);
    }
    if (hit->rstrip) {
      while (me < end) {
        char32_t c;
        const int n = utf8_next(text.substr(0, end), me, &c);
        if (n <= 0 || !is_unicode_whitespace(c)) break;
        me += static_cast<size_t>(n);
      }
    }
    if (mb < start_offset) continue;  // overlaps whitespace an earlier rstrip already took
    if (start_offset < mb) out.push_back({start_offset, mb, -1});
    out.push_back({mb, me, hit->id});
    start_offset = me;
    i = std::max(i, me);
  }
  if (start_offset < end) out.push_back({start_offset, end, -1});
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  std::vector<Segment> first;
  split_with(raw_, text, 0, text.size(), first);
  for (const auto& seg : first) {
    if (seg.added_id >= 0) {
      out.push_back(seg);
    } else {
      split_with(normalized_, text, seg.begin, seg.end, out);
    }
  }
}

}  // namespace gridq::text

#include "text/content_escape.h"

#include <algorithm>
#include <charconv>
#include <vector>

namespace gridq::text {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "\xEF\xB7\x90";   // U+FDD0
constexpr std::string_view kClose = "\xEF\xB7\x91";  // U+FDD1

// Added tokens by first byte, longest first, so the longest text at a position is the one escaped (any
// choice restores the same bytes; longest keeps escapes few).
struct Index {
  std::vector<std::pair<std::string_view, size_t>> by_byte[256];
  explicit Index(const Tokenizer& tok) {
    const auto& added = tok.added_tokens();
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string& c = added[i].content;
      if (!c.empty()) by_byte[static_cast<unsigned char>(c[0])].emplace_back(c, i);
    }
    for (auto& v : by_byte)
      std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first.size() > b.first.size(); });
  }
};

std::string escape_with(std::string_view s, const Index& ix, size_t literal_open) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t hit = SIZE_MAX, len = 0;
    if (s.substr(i, kOpen.size()) == kOpen) {
      hit = literal_open;
      len = kOpen.size();
    } else {
      for (const auto& [text, idx] : ix.by_byte[static_cast<unsigned char>(s[i])])
        if (s.substr(i, text.size()) == text) {
          hit = idx;
          len = text.size();
          break;
        }
    }
    if (hit == SIZE_MAX) {
      out += s[i++];
      continue;
    }
    out += kOpen;
    out += std::to_string(hit);
    out += kClose;
    i += len;
  }
  return out;
}

ojson escape_json(const ojson& v, const Index& ix, size_t literal_open) {
  if (v.is_string()) return escape_with(v.get_ref<const std::string&>(), ix, literal_open);
  if (v.is_array()) {
    ojson out = ojson::array();
    for (const auto& e : v) out.push_back(escape_json(e, ix, literal_open));
    return out;
  }
  if (v.is_object()) {
    ojson out = ojson::object();
    // Keys are client text too (a tool's parameter names, a call's argument names) and templates write them
    // out (`tool | tojson`, `<arg_key>` + key). Escaping changes only keys holding added-token text or
    // U+FDD0, never the names a template looks up (role, content, ...), and is injective, so no two keys
    // merge.
    for (auto it = v.begin(); it != v.end(); ++it)
      out[escape_with(it.key(), ix, literal_open)] = escape_json(it.value(), ix, literal_open);
    return out;
  }
  return v;
}

}  // namespace

ojson escape_added_tokens(const ojson& v, const Tokenizer& tok) {
  const Index ix(tok);
  return escape_json(v, ix, tok.added_tokens().size());
}

std::string escape_added_token_text(std::string_view s, const Tokenizer& tok) {
  const Index ix(tok);
  return escape_with(s, ix, tok.added_tokens().size());
}

std::string unescape_added_tokens(std::string_view s, const Tokenizer& tok) {
  const auto& added = tok.added_tokens();
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t p = s.find(kOpen, i);
    if (p == std::string_view::npos) break;
    out.append(s, i, p - i);
    const size_t digits = p + kOpen.size();
    size_t idx = 0;
    auto [end, ec] = std::from_chars(s.data() + digits, s.data() + s.size(), idx);
    const size_t e = static_cast<size_t>(end - s.data());
    if (ec == std::errc() && e > digits && s.substr(e, kClose.size()) == kClose && idx <= added.size()) {
      out += idx == added.size() ? std::string(kOpen) : added[idx].content;
      i = e + kClose.size();
    } else {
      out += kOpen;
      i = digits;
    }
  }
  out.append(s.substr(std::min(i, s.size())));
  return out;
}

}  // namespace gridq::text

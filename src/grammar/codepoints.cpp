#include "grammar/codepoints.h"

#include <algorithm>

namespace gridq::grammar {

CodepointSet CodepointSet::range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, std::min(hi, kMax));
  normalize();
}

void CodepointSet::add(const CodepointSet& o) {
  ranges_.insert(ranges_.end(), o.ranges_.begin(), o.ranges_.end());
  normalize();
}

void CodepointSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& r : ranges_) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  ranges_ = std::move(out);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMax) out.ranges_.emplace_back(next, kMax);
  return out;
}

CodepointSet CodepointSet::intersect(const CodepointSet& o) const {
  CodepointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < o.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].first, o.ranges_[j].first);
    uint32_t hi = std::min(ranges_[i].second, o.ranges_[j].second);
    if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < o.ranges_[j].second)
      ++i;
    else
      ++j;
  }
  return out;
}

bool CodepointSet::contains(uint32_t cp) const {
  for (const auto& [lo, hi] : ranges_)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp) {
  auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80                ? 0
          : c >= 0xC2 && c < 0xE0 ? 1
          : c >= 0xE0 && c < 0xF0 ? 2
          : c >= 0xF0 && c < 0xF5 ? 3
                                  : -1;
  if (n < 0 || i + n >= s.size()) return false;
  if (n == 0) {
    cp = c;
    ++i;
    return true;
  }
  cp = c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (d & 0x3F);
  }
  static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > CodepointSet::kMax || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  i += n + 1;
  return true;
}

namespace {

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] into ranges whose UTF-8 encodings differ only by per-position byte ranges (the
// utf8-ranges construction): first at encoding-length boundaries, then at continuation-byte boundaries.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  if (lo > hi) return;
  for (uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= m && m < hi) {
      utf8_sequences(lo, m, out);
      utf8_sequences(m + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  ByteRanges r;
  for (size_t k = 0; k < a.size(); ++k)
    r.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(r));
}

std::vector<Seq> utf8_alts(Builder& b, const CodepointSet& s) {
  CodepointSet cps = s.minus(CodepointSet::range(0xD800, 0xDFFF));
  std::vector<ByteRanges> seqs;
  for (const auto& [lo, hi] : cps.ranges()) utf8_sequences(lo, hi, seqs);
  std::vector<Seq> alts;
  ByteSet ascii;  // the one-byte sequences merge into one class: one matcher item instead of several
  for (const ByteRanges& r : seqs)
    if (r.size() == 1) ascii |= byte_range(r[0].first, r[0].second);
  if (ascii.any()) alts.push_back({b.cls(ascii)});
  for (const ByteRanges& r : seqs) {
    if (r.size() == 1) continue;
    Seq q;
    for (const auto& [x, y] : r) q.push_back(b.cls(byte_range(x, y)));
    alts.push_back(std::move(q));
  }
  return alts;
}

std::string escape_cp(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  static const char* hex = "0123456789abcdef";
  return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
}

CodepointSet must_escape() {
  CodepointSet s = CodepointSet::range(0, 0x1F);
  s.add('"', '"');
  s.add('\\', '\\');
  return s;
}

// Flags `sym` (a rule of one-character alternatives) with what it accepts of `chars` (its characters read
// raw, as one UTF-8 sequence each): the one-byte ones and whether every multi-byte one is there.
Sym mark_char_class(Builder& b, Sym sym, const CodepointSet& chars) {
  if (!sym.is_rule()) return sym;
  Rule& r = b.rule(sym.index());
  r.char_class = true;
  for (const auto& [lo, hi] : chars.ranges())
    for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x7F); ++cp) r.char_ascii.set(cp);
  auto holds = [&](uint32_t lo, uint32_t hi) {
    const CodepointSet in = chars.intersect(CodepointSet::range(lo, hi));
    return in.ranges().size() == 1 && in.ranges()[0] == std::make_pair(lo, hi);
  };
  r.char_all_multi = holds(0x80, 0xD7FF) && holds(0xE000, CodepointSet::kMax);
  return sym;
}

}  // namespace

Sym lower_utf8(Builder& b, const CodepointSet& s) { return mark_char_class(b, b.alt(utf8_alts(b, s)), s); }

Sym lower_json_char(Builder& b, const CodepointSet& s) {
  const CodepointSet esc = must_escape();
  std::vector<Seq> alts = utf8_alts(b, s.minus(esc));
  // The escapes, grouped so a character costs the matcher few alternatives: \ then one class of the short
  // forms, and \u00 then a class of low nibbles per high nibble.
  const CodepointSet escaped = s.intersect(esc);
  ByteSet short_forms, low[2];
  for (const auto& [lo, hi] : escaped.ranges())
    for (uint32_t cp = lo; cp <= hi; ++cp) {
      std::string e = escape_cp(cp);
      if (e.size() == 2)
        short_forms.set(static_cast<unsigned char>(e[1]));
      else
        low[cp >> 4].set(static_cast<unsigned char>(e[5]));
    }
  if (short_forms.any()) alts.push_back(b.lit("\\") + b.cls(short_forms));
  for (int h = 0; h < 2; ++h)
    if (low[h].any()) alts.push_back(b.lit(h == 0 ? "\\u000" : "\\u001") + b.cls(low[h]));
  return mark_char_class(b, b.alt(std::move(alts)), s.minus(esc));
}

std::string json_escape_body(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == '"' || c == '\\')
      out += escape_cp(c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

Sym json_free_char(Builder& b) {
  std::vector<Seq> alts = utf8_alts(b, must_escape().complement());
  ByteSet simple;
  for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  ByteSet hex = byte_range('0', '9') | byte_range('a', 'f') | byte_range('A', 'F');
  // \uXXXX without lone surrogates (D800-DFFF), so the text always decodes.
  ByteSet not_d = byte_range('0', '9') | byte_range('a', 'c') | byte_range('A', 'C') | byte_range('e', 'f') |
                  byte_range('E', 'F');
  ByteSet d;
  d.set('d');
  d.set('D');
  Sym h = b.cls(hex);
  Sym u4 = b.alt({Seq{b.cls(not_d), h, h, h}, Seq{b.cls(d), b.cls(byte_range('0', '7')), h, h}});
  alts.push_back(b.lit("\\") + b.cls(simple));
  alts.push_back(b.lit("\\u") + u4);
  Sym c = mark_char_class(b, b.alt(std::move(alts)), must_escape().complement());
  b.rule(c.index()).free_char = true;
  return c;
}

Sym json_free_chars(Builder& b) {
  Sym c = json_free_char(b);
  Sym r = b.rep({c}, 0, kUnbounded);
  b.rule(r.index()).free_string_chars = true;
  return r;
}

}  // namespace gridq::grammar

// Sets of Unicode code points (sorted, merged ranges) and their lowering to byte-level grammar: raw UTF-8
// (regex and GBNF over plain text) or as the bytes of a JSON string body (a regex `pattern`, an enum of
// property names), where a character that JSON must escape is written as its one canonical escape, so two
// different byte strings never decode to the same text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace gridq::grammar {

class CodepointSet {
 public:
  static constexpr uint32_t kMax = 0x10FFFF;
  CodepointSet() = default;
  static CodepointSet range(uint32_t lo, uint32_t hi);
  static CodepointSet all() { return range(0, kMax); }
  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& o);
  CodepointSet complement() const;
  CodepointSet minus(const CodepointSet& o) const { return intersect(o.complement()); }
  CodepointSet intersect(const CodepointSet& o) const;
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t cp) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// Any one code point of `s` (surrogates excluded) as UTF-8. Empty set: a rule with no alternatives.
Sym lower_utf8(Builder& b, const CodepointSet& s);
// Any one code point of `s` as it appears inside a JSON string literal (canonical escapes).
Sym lower_json_char(Builder& b, const CodepointSet& s);
// The JSON string body of `text` (a UTF-8 string), canonical escapes.
std::string json_escape_body(std::string_view text);
// Any JSON string character including every escape form; the unconstrained string body is this repeated.
Sym json_free_char(Builder& b);
// The unconstrained JSON string body (flagged so token masks take the fast path).
Sym json_free_chars(Builder& b);

// Decodes one UTF-8 code point at s[i], advancing i; returns false on malformed input.
bool decode_utf8(std::string_view s, size_t& i, uint32_t& cp);
void append_utf8(std::string& out, uint32_t cp);

}  // namespace gridq::grammar

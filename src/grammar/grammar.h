// Grammar IR: a context-free grammar whose terminals are byte classes (a 256-bit set), so every front end
// (JSON Schema, regex, choice, GBNF) lowers to the same thing and the matcher never sees characters, only
// bytes. Rules are either a list of alternatives (each a sequence of symbols) or a counted repetition of one
// symbol; repetition is native (not desugared to recursion) so x{0,1000} costs one rule and the matcher's
// state stays small inside long strings.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace gridq::grammar {

using ByteSet = std::bitset<256>;

ByteSet byte_range(uint8_t lo, uint8_t hi);

// A symbol is a terminal (index into Grammar::classes) or a nonterminal (index into Grammar::rules).
struct Sym {
  uint32_t v = 0;
  static constexpr uint32_t kRuleBit = 0x80000000u;
  static Sym terminal(uint32_t cls) { return Sym{cls}; }
  static Sym rule(uint32_t r) { return Sym{r | kRuleBit}; }
  bool is_rule() const { return (v & kRuleBit) != 0; }
  uint32_t index() const { return v & ~kRuleBit; }
  bool operator==(const Sym&) const = default;
};
using Seq = std::vector<Sym>;

constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

struct Rule {
  std::string name;      // for stats and GBNF errors; may be empty
  bool defined = false;  // declared rules must be defined before finish()
  bool is_repeat = false;
  std::vector<Seq> alts;  // !is_repeat: alternatives
  Sym body;               // is_repeat: body{min,max}
  uint32_t min = 0, max = 0;
  // Set on the one rule whose language is "any JSON string character" repeated without bound: the token
  // masker then accepts every token made only of such characters without walking it (token_mask.h).
  bool free_string_chars = false;
  bool free_char = false;  // the JSON string character rule those repeat (its alternatives start a character)
  // Set on a rule whose every alternative reads one character (lower_utf8, lower_json_char): it accepts each
  // one-byte character in char_ascii and, when char_all_multi, every multi-byte UTF-8 character (strict
  // encoding). A subset of its language, enough for the token masker to accept a whole subtree read by a
  // repetition of this rule without walking it (token_mask.h).
  bool char_class = false;
  bool char_all_multi = false;
  ByteSet char_ascii;
};

struct GrammarStats {
  size_t rules = 0, alts = 0, symbols = 0, classes = 0;
};

// One alternative of a rule, flattened for the matcher; a repetition rule has one alt with repeat set.
struct FlatAlt {
  uint32_t rule = 0;
  uint32_t begin = 0, end = 0;  // [begin, end) in Grammar::flat_syms
  bool repeat = false;
};

class Grammar {
 public:
  std::vector<Rule> rules;
  std::vector<ByteSet> classes;
  ByteSet free_char_first;  // bytes that start an alternative of a free_char rule (filled by finish())
  uint32_t root = 0;        // the start rule (start ::= the front end's root); filled by finish()
  // Filled by finish(): the matcher's tables.
  std::vector<bool> nullable;            // [rules]
  std::vector<FlatAlt> flat_alts;        // [all alts]
  std::vector<Sym> flat_syms;            // [all symbols]
  std::vector<uint32_t> rule_first_alt;  // [rules + 1]: rule r's alts are [first[r], first[r+1])
  GrammarStats stats() const;
};

// Limits that bound a compile (every front end checks them; a breach is a compile error, not a crash).
struct Limits {
  size_t max_input_bytes = 1 << 20;  // schema / grammar / regex text
  size_t max_symbols = 2'000'000;    // total symbols over all rules
  size_t max_depth = 128;            // schema / regex / grammar nesting
  size_t max_object_keys = 10'000;   // keys in one JSON object of a schema (properties, $defs)
  double max_seconds = 1.0;          // wall-clock compile budget
};

// Builds a Grammar; front ends compose Seqs and let the builder create rules for alternatives and
// repetitions. Terminal classes are interned.
class Builder {
 public:
  explicit Builder(Limits limits = {});

  Sym cls(const ByteSet& s);
  Seq lit(std::string_view bytes);
  // A nonterminal matching any of `alts`. A single one-symbol alternative is returned as is.
  Sym alt(std::vector<Seq> alts, std::string name = {});
  Sym seq_rule(Seq s) { return alt({std::move(s)}); }
  Sym rep(Seq body, uint32_t min, uint32_t max);
  Sym opt(Seq body) { return alt({std::move(body), Seq{}}); }
  Sym star(Seq body) { return rep(std::move(body), 0, kUnbounded); }
  // Forward declaration for recursion ($ref, GBNF rule names); define() fills it later.
  uint32_t declare(std::string name);
  void define(uint32_t rule, std::vector<Seq> alts);
  Rule& rule(uint32_t r) { return g_->rules[r]; }
  size_t rule_count() const { return g_->rules.size(); }

  // Fails once the symbol or time limit is passed; front ends call it as they go.
  Status check_limits() const;
  Expected<std::shared_ptr<const Grammar>> finish(Sym root);

 private:
  uint32_t new_rule(std::string name);
  std::unique_ptr<Grammar> g_;
  Limits limits_;
  size_t symbols_ = 0;
  double deadline_ = 0;
  std::unordered_map<std::string, uint32_t> class_index_;  // ByteSet bytes -> class id (interning)
};

inline Seq operator+(Seq a, const Seq& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
inline Seq operator+(Seq a, Sym b) {
  a.push_back(b);
  return a;
}

double now_seconds();

}  // namespace gridq::grammar

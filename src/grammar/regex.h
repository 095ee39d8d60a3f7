// Regular expressions (the ECMAScript subset JSON Schema `pattern` uses): literals, ., classes with ranges
// and negation, \d \w \s (ASCII, the subset both ECMAScript and Python agree on), escapes (\n \t \xHH
// \uHHHH ...), groups ((...), (?:...), (?<name>...)), alternation, * + ? {m} {m,} {m,n} (lazy forms
// match the same language), ^ and $ at the ends of a top-level alternative. Backreferences, lookaround, word
// boundaries, \p{...} and inline flags are compile errors naming the construct.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

struct RegexOptions {
  bool json_string = false;  // lower to the bytes of a JSON string body (canonical escapes)
  bool search = false;       // JSON Schema semantics: unanchored sides may have any text around the match
};

Expected<Sym> compile_regex(Builder& b, std::string_view pattern, const RegexOptions& opt, size_t max_depth);

}  // namespace gridq::grammar

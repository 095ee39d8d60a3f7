// GBNF, llama.cpp's grammar syntax: `name ::= alternatives` rules, "literals" and [classes] over Unicode
// code points (lowered to UTF-8), `.`, groups, * + ? {m} {m,} {m,n}, # comments; the start rule is `root`.
// Newlines are plain whitespace here (a rule ends where the next `name ::=` begins), which accepts every
// grammar llama.cpp accepts. Token references (<[id]>, <|name|>) are compile errors.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

Expected<Sym> compile_gbnf(Builder& b, std::string_view text, size_t max_depth);

}  // namespace gridq::grammar

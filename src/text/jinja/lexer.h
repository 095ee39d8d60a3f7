// Jinja2 lexer: splits a template into data and tag tokens with Jinja2's whitespace rules (`-`/`+` markers,
// trim_blocks, lstrip_blocks, one trailing newline dropped, \r\n and \r normalised to \n).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gridq::text::jinja {

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

struct Token {
  enum class Type { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // data, name, decoded string literal, operator
  int64_t i = 0;
  double f = 0;
  int line = 1;
};

Expected<std::vector<Token>> lex(std::string_view source, const LexOptions& opts, const std::string& name);

}  // namespace gridq::text::jinja

// Jinja2 parser: tokens -> statement tree, with Jinja2's operator precedence.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace gridq::text::jinja {

Expected<Body> parse(const std::vector<Token>& tokens, const std::string& name);

}  // namespace gridq::text::jinja

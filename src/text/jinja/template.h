// A Jinja2 template engine sufficient for Hugging Face chat templates (Laguna, Qwen3 and Llama-3 style):
// statements if/for/set/macro/filter/with/break/continue, Jinja2's expression grammar, the common filters and
// tests, Python str/dict methods, namespace(), raise_exception() and strftime_now(). Output matches jinja2
// rendering with trim_blocks and lstrip_blocks as transformers' apply_chat_template uses.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace gridq::text::jinja {

struct TemplateOptions {
  LexOptions lex;                      // defaults: trim_blocks and lstrip_blocks on
  std::string name = "template";       // used in error messages: "<name>:<line>: ..."
};

class Template {
 public:
  // Syntax errors come back as "<name>:<line>: syntax error: ...".
  static Expected<Template> parse(std::string_view source, const TemplateOptions& opts = {});

  // `context` must be a JSON object; its keys become template variables. Runtime errors (including
  // raise_exception) come back as "<name>:<line>: ...".
  Expected<std::string> render(const nlohmann::ordered_json& context) const;
  Expected<std::string> render(const std::vector<std::pair<std::string, Value>>& vars) const;

 private:
  std::shared_ptr<const Body> body_;
  std::string name_;
};

}  // namespace gridq::text::jinja

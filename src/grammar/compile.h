// The front door: every input kind compiles to one Grammar, within the limits (size, nesting depth,
// wall-clock time) so a hostile input fails fast with a message instead of hanging or crashing.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

enum class InputKind { kJsonSchema, kJsonObject, kRegex, kChoice, kGbnf };

struct CompileOptions {
  // Compact JSON (no whitespace between tokens) unless this is set: then [ \t\n\r]* between tokens.
  bool flexible_whitespace = false;
  // When a schema says nothing about additionalProperties, JSON Schema allows any extra property; like
  // OpenAI's strict mode we emit none unless this is set.
  bool allow_additional_properties = false;
  Limits limits;
};

// kJsonSchema: a JSON Schema document. kJsonObject: ignored text, any JSON object. kRegex: the whole output
// matches the pattern. kChoice: a JSON array of strings, the output is one of them. kGbnf: GBNF grammar.
Expected<std::shared_ptr<const Grammar>> compile(InputKind kind, std::string_view text,
                                                 const CompileOptions& opt = {});

Expected<InputKind> parse_input_kind(std::string_view name);  // json_schema, json_object, regex, choice, gbnf

}  // namespace gridq::grammar

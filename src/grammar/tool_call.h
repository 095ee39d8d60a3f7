// Tool calls in the poolside_v1 syntax (api.md §5) as a grammar (and in the JSON syntax, below), for
// tool_choice "required" or a named function: `<tool_call>NAME`, then
// `<arg_key>K</arg_key><arg_value>V</arg_value>` per argument in the schema's property order (required ones
// always, optional ones maybe, no others), then `</tool_call>`; several calls in a row when parallel. V is
// compact JSON valid for the property's schema, except where the tool parser keeps V byte for byte (a
// property typed "string", text::ToolSchemas): there V is the raw text of a valid string (enum/const values,
// pattern, format, min/maxLength in code points), without '<' (so it can never read as a closing tag) or
// control characters other than tab and newlines.
//
// `<tool_call>` and `</tool_call>` are single special tokens. The grammar writes them as kToolCallOpen and
// kToolCallClose, byte strings that no UTF-8 text contains; the server's tool vocabulary gives those two ids
// these bytes and excludes every other token holding a 0xFF byte, so only the real marker tokens match.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace gridq::grammar {

inline constexpr std::string_view kToolCallOpen = "\xff\x01";
inline constexpr std::string_view kToolCallClose = "\xff\x02";

// tools: the request's OpenAI `tools` array (validated by the protocol layer). only_name: non-empty for a
// named tool_choice. An unsupported keyword in a tool's parameters is an error naming the tool and it.
Expected<std::shared_ptr<const Grammar>> compile_poolside_tool_calls(const nlohmann::ordered_json& tools,
                                                                     const std::string& only_name,
                                                                     bool parallel,
                                                                     const CompileOptions& opt = {});
// The same in the generic JSON (Hermes/Qwen3) syntax of text/tool_parser_json.h:
// `<tool_call>\n{"name":"NAME","arguments":ARGS}\n</tool_call>`, ARGS compact JSON valid for `parameters`.
Expected<std::shared_ptr<const Grammar>> compile_json_tool_calls(const nlohmann::ordered_json& tools,
                                                                 const std::string& only_name, bool parallel,
                                                                 const CompileOptions& opt = {});

}  // namespace gridq::grammar

// Generic JSON tool-call format (Hermes/Qwen3 style), api.md §5:
//   <tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>
// A block that is not a JSON object with a string "name" and an object "arguments" (or "parameters") stays in
// content verbatim, as does an unterminated block. Content is all text outside valid blocks; whitespace-only
// content is null once a call was parsed. The stream emits a call's name and arguments when its block closes
// (validity is known only then), which keeps streaming byte-identical to the non-streaming parse.
#pragma once

#include <memory>
#include <string_view>

#include "text/tool_parser_common.h"

namespace gridq::text {

// `schemas` decides which names are calls (ToolSchemas::accepts); a block naming another stays in content.
ToolParseResult parse_json_tool_calls(std::string_view text, const ToolSchemas& schemas = {});
std::unique_ptr<ToolStreamParser> make_json_stream_parser(ToolSchemas schemas = {});

}  // namespace gridq::text

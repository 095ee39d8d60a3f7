// poolside_v1 (Laguna) tool-call format, api.md §5:
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
// The parser never throws. Grammar details the spec leaves open, chosen so that streaming and non-streaming
// agree for every split of the text:
//  - leading whitespace after <tool_call> is skipped before NAME;
//  - keys are trimmed; a pair whose </arg_key> is not followed (after whitespace) by <arg_value> is skipped
//    and scanning for <arg_key> resumes there; text between pairs is ignored;
//  - a value with no </arg_value> runs to </tool_call>;
//  - once any <tool_call> was seen, whitespace-only content is null.
// Known divergence: an unterminated block at the end of generation makes the non-streaming parse return the
// whole text as content (spec rule 7), while a stream that already sent the call's name cannot retract it;
// the stream closes the call's arguments so they still parse.
#pragma once

#include <memory>
#include <string_view>

#include "text/tool_parser_common.h"

namespace gridq::text {

ToolParseResult parse_poolside_tool_calls(std::string_view text, const ToolSchemas& schemas);
std::unique_ptr<ToolStreamParser> make_poolside_stream_parser(ToolSchemas schemas);

}  // namespace gridq::text

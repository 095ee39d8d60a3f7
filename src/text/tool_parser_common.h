// Shared types of the tool-call parsers (api.md §5): the non-streaming result, streaming deltas, the
// per-tool argument types taken from the request's JSON schemas, tool_choice filtering, and the one JSON
// writer both the streaming and non-streaming paths use (so their `arguments` strings are byte-equal).
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace gridq::text {

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, Python-style separators, non-ASCII unescaped
};

struct ToolParseResult {
  std::optional<std::string> content;  // null when whitespace-only and a call block was seen
  std::vector<ParsedToolCall> calls;
};

// One streamed tool-call part. The first delta of a call has first = true and a non-empty name; later ones
// carry only argument fragments. Indexes count kept calls from 0 in order of appearance.
struct ToolCallDelta {
  int index = 0;
  bool first = false;
  std::string name;
  std::string arguments;
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// For each tool name, the argument keys whose schema type is "string" (kept byte for byte), and which names
// a call may have at all.
struct ToolSchemas {
  std::map<std::string, std::set<std::string>, std::less<>> string_args;
  // The request's declared function names; `closed`: a call must name one of them (set from `tools`).
  std::set<std::string, std::less<>> names;
  bool closed = false;
  bool is_string(std::string_view tool, std::string_view key) const;
  // Whether a parsed call with this name is a call (issue 14 item 3). A name the request did not declare
  // (sampling noise such as "_"), or one holding the format's own marker text ("<tool_call><tool_call>"),
  // would hand the client a call it never offered, so the block stays text instead (vLLM keeps such output
  // as content).
  bool accepts(std::string_view name) const;
};

// Reads OpenAI `tools` ([{"type":"function","function":{"name","parameters":{"properties":{K:{"type"}}}}}]).
// Malformed entries contribute nothing (validation happens in the protocol layer).
ToolSchemas tool_schemas_from_openai(const nlohmann::json& tools);

class ToolStreamParser {
 public:
  virtual ~ToolStreamParser() = default;
  virtual ToolStreamDelta feed(std::string_view text) = 0;
  // End of generation: flushes held-back text and closes what can be closed.
  virtual ToolStreamDelta finish() = 0;
  // True once any kept call delta was emitted (finish_reason "tool_calls").
  virtual bool saw_calls() const = 0;
};

// tool_choice effects that apply after parsing: a named choice keeps only calls to that function;
// parallel_tool_calls = false keeps only the first kept call.
struct ToolCallFilter {
  std::optional<std::string> only_name;
  bool parallel = true;
};

ToolParseResult apply_filter(ToolParseResult r, const ToolCallFilter& f);
// Wraps a streaming parser so dropped calls never surface and indexes are renumbered.
std::unique_ptr<ToolStreamParser> filtered(std::unique_ptr<ToolStreamParser> inner, ToolCallFilter f);

// JSON writer with Python json.dumps(ensure_ascii=False) layout: ", " and ": " separators.
std::string dump_json_py(const nlohmann::ordered_json& j);
// JSON string escaping of raw bytes (no quotes added); splitting the input anywhere and escaping the parts
// gives the same bytes as escaping the whole.
std::string json_escape(std::string_view s);

// Parses a Python literal (None/True/False, numbers, '...'/"..." strings, lists, tuples, dicts).
std::optional<nlohmann::ordered_json> parse_python_literal(std::string_view s);

// Length of the longest suffix of `buf` that is a proper prefix of one of `tags` (held back in streams).
size_t partial_tag_suffix(std::string_view buf, std::initializer_list<std::string_view> tags);

bool is_all_space(std::string_view s);
std::string_view trim_space(std::string_view s);

// The content side of both streaming tool parsers: text outside call blocks goes to content, except
//  - a suffix that may still grow into `<tool_call>` (held until the next feed resolves it), and
//  - leading whitespace, held until real text follows: content that is only whitespace around calls is
//    null in the non-streaming parse, so the stream may send it only once that cannot happen.
class ContentStream {
 public:
  // Moves the text of `buf` before the next `<tool_call>` to `out` (or drops it when `drop`, e.g. text
  // between calls) and consumes the tag: true. Without a tag it moves all but a possible partial tag (all
  // when `final`) and returns false.
  bool until_open(std::string& buf, bool final, std::string& out, bool drop = false);
  // Content text that is not scanned for tags (an invalid block kept verbatim, an unterminated tail).
  void emit(std::string& out, std::string_view s);
  // End of generation: the held leading whitespace is content only when `keep_space`.
  void finish(std::string& out, bool keep_space);

 private:
  std::string pending_ws_;
  bool emitted_ = false;
};

}  // namespace gridq::text

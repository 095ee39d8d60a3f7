// Turns one choice's generated token ids into what the client sees (api.md §4.9, §6, §8): detokenize
// without splitting code points, route by reasoning markers (by id), match stop strings across token
// boundaries with hold-back, and run the tool-call parser over the content channel only. The same object
// serves streaming (deltas) and non-streaming (result()), so streamed text equals non-streamed text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/reasoning_parser.h"
#include "text/tokenizer.h"
#include "text/tool_parser_common.h"

namespace gridq::serve {

enum class ToolParserKind { kNone, kPoolside, kJson };

struct OutputSpec {
  const text::Tokenizer* tok = nullptr;
  bool reasoning = false;  // chat: run the reasoning parser
  text::ReasoningMarkers markers;
  text::ReasoningMode initial = text::ReasoningMode::kContent;
  std::vector<int32_t> keep_text_ids;  // special tokens whose text must survive skip_special (<tool_call>)
  ToolParserKind tools = ToolParserKind::kNone;
  text::ToolSchemas schemas;
  text::ToolCallFilter filter;
  std::vector<std::string> stop;
  bool include_stop_str = false;
  bool skip_special = true;
  bool streaming = false;
};

struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<text::ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

struct OutputResult {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
  std::vector<text::ParsedToolCall> calls;
};

class OutputProcessor {
 public:
  explicit OutputProcessor(OutputSpec spec);
  // Feeds one generated id (never a stop id). Sets `stopped` when a stop string matched: generation ends.
  OutputDelta push(int32_t id, bool& stopped);
  // End of generation: flushes everything held back.
  OutputDelta finish();
  // Valid after finish(): the whole output (non-streaming parse of tool calls).
  OutputResult result() const;
  bool saw_tool_calls() const;

 private:
  void emit_text(std::string_view text, OutputDelta& d);
  void route(std::string_view text, OutputDelta& d);
  void flush_pending(OutputDelta& d);

  OutputSpec s_;
  text::StreamDecoder dec_;
  text::ReasoningParser rp_;
  std::unique_ptr<text::ToolStreamParser> tp_;
  std::string hold_;  // text held back because it may begin a stop string
  bool stopped_ = false;
  std::string reasoning_all_, content_all_;
  std::vector<text::ParsedToolCall> final_calls_;
  bool finished_ = false;
  bool stream_saw_calls_ = false;
};

}  // namespace gridq::serve

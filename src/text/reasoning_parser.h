// Splits generated output into a reasoning channel and a content channel (api.md §6). The mode is decided
// from the rendered prompt, not from request kwargs (the vLLM poolside_v1 bug, issue #49379), and markers are
// matched by token id, so `</think>` never reaches either channel.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gridq::text {

// Control ids looked up by their text in the tokenizer (laguna.md §5: never by number). -1 = absent.
struct ReasoningMarkers {
  int32_t think_start = -1;  // <think>
  int32_t think_end = -1;    // </think>
  int32_t assistant = -1;    // <assistant>
};

enum class ReasoningMode { kContent, kReasoning };

// §6.1: scans back from the end of the prompt to the last <assistant>. <think> met first -> reasoning;
// </think> met first, or <assistant>/the start reached -> content.
ReasoningMode initial_reasoning_mode(std::span<const int32_t> prompt_ids, const ReasoningMarkers& markers);

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// Streaming router. Callers pass marker ids through feed_marker() (they produce no text) and the detokenized
// text of every other token through feed_text(). The parser holds nothing back: markers are whole tokens.
class ReasoningParser {
 public:
  ReasoningParser(ReasoningMarkers markers, ReasoningMode initial) : m_(markers), mode_(initial) {}

  bool is_marker(int32_t id) const { return id >= 0 && (id == m_.think_start || id == m_.think_end); }
  // <think> opens reasoning from any state (§6.1, §6.4, §6.5); </think> closes it; neither is emitted.
  void feed_marker(int32_t id);
  ReasoningDelta feed_text(std::string_view text) const;
  ReasoningMode mode() const { return mode_; }

 private:
  ReasoningMarkers m_;
  ReasoningMode mode_;
};

// One generated token as the parser sees it: a marker id, or text (marker_id = -1).
struct ReasoningPiece {
  int32_t marker_id = -1;
  std::string text;
};

struct ReasoningResult {
  std::optional<std::string> reasoning;  // null when no reasoning text was produced
  std::optional<std::string> content;    // null when empty
};

// Non-streaming parse: the concatenation of what the streaming parser would emit.
ReasoningResult parse_reasoning(std::span<const ReasoningPiece> pieces, const ReasoningMarkers& markers,
                                ReasoningMode initial);

}  // namespace gridq::text

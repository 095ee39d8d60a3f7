#include "text/reasoning_parser.h"

namespace gridq::text {

ReasoningMode initial_reasoning_mode(std::span<const int32_t> prompt_ids, const ReasoningMarkers& m) {
  for (size_t i = prompt_ids.size(); i-- > 0;) {
    const int32_t id = prompt_ids[i];
    if (id < 0) continue;
    if (id == m.think_start) return ReasoningMode::kReasoning;
    if (id == m.think_end) return ReasoningMode::kContent;
    if (id == m.assistant) return ReasoningMode::kContent;
  }
  return ReasoningMode::kContent;
}

void ReasoningParser::feed_marker(int32_t id) {
  if (id < 0) return;
  if (id == m_.think_start)
    mode_ = ReasoningMode::kReasoning;
  else if (id == m_.think_end)
    mode_ = ReasoningMode::kContent;
}

ReasoningDelta ReasoningParser::feed_text(std::string_view text) const {
  ReasoningDelta d;
  if (mode_ == ReasoningMode::kReasoning)
    d.reasoning.assign(text);
  else
    d.content.assign(text);
  return d;
}

ReasoningResult parse_reasoning(std::span<const ReasoningPiece> pieces, const ReasoningMarkers& markers,
                                ReasoningMode initial) {
  ReasoningParser p(markers, initial);
  std::string reasoning, content;
  for (const auto& piece : pieces) {
    if (piece.marker_id >= 0 && p.is_marker(piece.marker_id)) {
      p.feed_marker(piece.marker_id);
      continue;
    }
    auto d = p.feed_text(piece.text);
    reasoning += d.reasoning;
    content += d.content;
  }
  ReasoningResult r;
  if (!reasoning.empty()) r.reasoning = std::move(reasoning);
  if (!content.empty()) r.content = std::move(content);
  return r;
}

}  // namespace gridq::text

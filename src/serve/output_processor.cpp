#include "serve/output_processor.h"

#include <algorithm>

#include "text/tool_parser_json.h"
#include "text/tool_parser_poolside.h"

namespace gridq::serve {

OutputProcessor::OutputProcessor(OutputSpec spec)
    : s_(std::move(spec)), dec_(*s_.tok, false), rp_(s_.markers, s_.initial) {
  if (s_.streaming && s_.tools != ToolParserKind::kNone) {
    auto inner = s_.tools == ToolParserKind::kPoolside ? text::make_poolside_stream_parser(s_.schemas)
                                                       : text::make_json_stream_parser(s_.schemas);
    tp_ = text::filtered(std::move(inner), s_.filter);
  }
}

void OutputProcessor::route(std::string_view text, OutputDelta& d) {
  if (text.empty()) return;
  auto rd = rp_.feed_text(text);
  if (!rd.reasoning.empty()) {
    reasoning_all_ += rd.reasoning;
    d.reasoning += rd.reasoning;
  }
  if (!rd.content.empty()) {
    content_all_ += rd.content;
    if (!s_.streaming) return;
    if (tp_) {
      auto td = tp_->feed(rd.content);
      d.content += td.content;
      for (auto& c : td.calls) d.calls.push_back(std::move(c));
    } else {
      d.content += rd.content;
    }
  }
}

// Stop strings: search the held text plus the new text; hold back the longest suffix that could start one.
void OutputProcessor::emit_text(std::string_view text, OutputDelta& d) {
  if (stopped_) return;
  if (s_.stop.empty()) {
    route(text, d);
    return;
  }
  hold_.append(text);
  size_t best = std::string::npos, best_len = 0;
  for (const auto& st : s_.stop) {
    size_t p = hold_.find(st);
    if (p != std::string::npos && (p < best)) {
      best = p;
      best_len = st.size();
    }
  }
  if (best != std::string::npos) {
    route(std::string_view(hold_).substr(0, s_.include_stop_str ? best + best_len : best), d);
    hold_.clear();
    stopped_ = true;
    return;
  }
  size_t keep = 0;
  for (const auto& st : s_.stop) {
    size_t maxlen = std::min(hold_.size(), st.size() - 1);
    for (size_t len = maxlen; len > keep; --len) {
      if (hold_.compare(hold_.size() - len, len, st, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  route(std::string_view(hold_).substr(0, hold_.size() - keep), d);
  hold_.erase(0, hold_.size() - keep);
}

void OutputProcessor::flush_pending(OutputDelta& d) {
  std::string rest = dec_.flush();
  if (!rest.empty()) emit_text(rest, d);
  if (!stopped_ && !hold_.empty()) {
    std::string h = std::move(hold_);
    hold_.clear();
    route(h, d);
  }
}

OutputDelta OutputProcessor::push(int32_t id, bool& stopped) {
  OutputDelta d;
  if (stopped_) {
    stopped = true;
    return d;
  }
  if (s_.reasoning && rp_.is_marker(id)) {
    // A marker cannot be part of a stop string or a code point: settle the text before it first.
    flush_pending(d);
    rp_.feed_marker(id);
    stopped = stopped_;
    return d;
  }
  if (s_.skip_special && s_.tok->is_special(id) &&
      std::find(s_.keep_text_ids.begin(), s_.keep_text_ids.end(), id) == s_.keep_text_ids.end()) {
    stopped = false;
    return d;
  }
  std::string text = dec_.push(id);
  if (!text.empty()) emit_text(text, d);
  stopped = stopped_;
  return d;
}

OutputDelta OutputProcessor::finish() {
  OutputDelta d;
  if (finished_) return d;
  finished_ = true;
  if (!stopped_) flush_pending(d);
  if (tp_) {
    auto td = tp_->finish();
    d.content += td.content;
    for (auto& c : td.calls) d.calls.push_back(std::move(c));
    stream_saw_calls_ = tp_->saw_calls();
  }
  if (!s_.streaming && s_.tools != ToolParserKind::kNone) {
    auto r = s_.tools == ToolParserKind::kPoolside ? text::parse_poolside_tool_calls(content_all_, s_.schemas)
                                                   : text::parse_json_tool_calls(content_all_, s_.schemas);
    r = text::apply_filter(std::move(r), s_.filter);
    final_calls_ = std::move(r.calls);
    content_all_ = r.content.value_or("");
  }
  return d;
}

OutputResult OutputProcessor::result() const {
  OutputResult r;
  if (!reasoning_all_.empty()) r.reasoning = reasoning_all_;
  if (!content_all_.empty()) r.content = content_all_;
  r.calls = final_calls_;
  return r;
}

bool OutputProcessor::saw_tool_calls() const {
  return s_.streaming ? (tp_ && (stream_saw_calls_ || tp_->saw_calls())) : !final_calls_.empty();
}

}  // namespace gridq::serve

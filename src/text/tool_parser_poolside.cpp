#include "text/tool_parser_poolside.h"

#include <set>

namespace gridq::text {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kKey = "<arg_key>";
constexpr std::string_view kKeyEnd = "</arg_key>";
constexpr std::string_view kVal = "<arg_value>";
constexpr std::string_view kValEnd = "</arg_value>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// A typed value: string-typed keeps bytes; otherwise JSON, then Python literal, then the raw string.
nlohmann::ordered_json convert_value(std::string_view raw, bool is_string) {
  if (is_string) return nlohmann::ordered_json(std::string(raw));
  std::string_view t = trim_space(raw);
  auto j = nlohmann::ordered_json::parse(t.begin(), t.end(), nullptr, false);
  if (!j.is_discarded()) return j;
  if (auto p = parse_python_literal(t)) return *p;
  return nlohmann::ordered_json(std::string(raw));
}

std::string open_key(bool first_pair, std::string_view key) {
  return std::string(first_pair ? "{\"" : ", \"") + json_escape(key) + "\": ";
}

// NAME: the text after leading whitespace up to the first <arg_key>, newline or the end of the body;
// `end` receives where it stops.
std::string block_name(std::string_view body, size_t& end) {
  size_t i = 0;
  while (i < body.size() && is_ws(body[i])) ++i;
  end = std::min(body.find(kKey, i), body.find('\n', i));
  if (end == std::string_view::npos) end = body.size();
  return std::string(trim_space(body.substr(i, end - i)));
}

std::optional<ParsedToolCall> parse_block(std::string_view body, const ToolSchemas& schemas) {
  size_t ne = 0;
  std::string name = block_name(body, ne);
  if (name.empty() || !schemas.accepts(name)) return std::nullopt;
  std::string args;
  std::set<std::string> seen;
  size_t q = ne;
  for (;;) {
    size_t k = body.find(kKey, q);
    if (k == std::string_view::npos) break;
    size_t ke = body.find(kKeyEnd, k + kKey.size());
    if (ke == std::string_view::npos) break;
    std::string key(trim_space(body.substr(k + kKey.size(), ke - k - kKey.size())));
    size_t a = ke + kKeyEnd.size();
    while (a < body.size() && is_ws(body[a])) ++a;
    if (body.substr(a, kVal.size()) != kVal) {
      q = a;
      continue;
    }
    size_t vs = a + kVal.size();
    size_t ve = body.find(kValEnd, vs);
    std::string_view v = ve == std::string_view::npos ? body.substr(vs) : body.substr(vs, ve - vs);
    q = ve == std::string_view::npos ? body.size() : ve + kValEnd.size();
    if (!seen.insert(key).second) continue;
    args += open_key(seen.size() == 1, key);
    args += dump_json_py(convert_value(v, schemas.is_string(name, key)));
  }
  args += seen.empty() ? "{}" : "}";
  return ParsedToolCall{std::move(name), std::move(args)};
}

}  // namespace

ToolParseResult parse_poolside_tool_calls(std::string_view text, const ToolSchemas& schemas) {
  ToolParseResult r;
  // The first real block: one whose name is empty (dropped) or accepted. A block naming an undeclared
  // function before it is plain text, so it stays in content; after it, it is dropped like an empty name.
  size_t first = std::string_view::npos;
  for (size_t p = 0;;) {
    size_t s = text.find(kOpen, p);
    if (s == std::string_view::npos) break;
    size_t e = text.find(kClose, s + kOpen.size());
    if (e == std::string_view::npos) {  // unterminated: no calls, whole text as content (rule 7)
      ToolParseResult whole;
      whole.content = std::string(text);
      return whole;
    }
    const std::string_view body = text.substr(s + kOpen.size(), e - s - kOpen.size());
    size_t ne = 0;
    const std::string name = block_name(body, ne);
    if (first == std::string_view::npos && !name.empty() && !schemas.accepts(name)) {
      p = e + kClose.size();
      continue;
    }
    if (first == std::string_view::npos) first = s;
    if (auto c = parse_block(body, schemas)) r.calls.push_back(std::move(*c));
    p = e + kClose.size();
  }
  if (first == std::string_view::npos) {
    if (!text.empty()) r.content = std::string(text);
    return r;
  }
  std::string_view before = text.substr(0, first);
  if (!is_all_space(before)) r.content = std::string(before);
  return r;
}

namespace {

class PoolsideStream final : public ToolStreamParser {
 public:
  explicit PoolsideStream(ToolSchemas s) : schemas_(std::move(s)) {}

  ToolStreamDelta feed(std::string_view text) override {
    buf_.append(text);
    ToolStreamDelta d;
    run(d, false);
    return d;
  }

  ToolStreamDelta finish() override {
    ToolStreamDelta d;
    run(d, true);
    switch (st_) {
      case St::kContent:
        content_.emit(d.content, buf_);
        break;
      case St::kName:  // an unterminated first block is text, as in the non-streaming parse
        if (!seen_block_) content_.emit(d.content, std::string(kOpen) + buf_);
        break;
      case St::kInvalidText:
        content_.emit(d.content, buf_);
        break;
      case St::kSkipBlock:
      case St::kAfterCall:
        break;
      case St::kValue:
        close_value(d, buf_);
        [[fallthrough]];
      case St::kScan:
      case St::kKey:
      case St::kAfterKey:
        close_call(d);
        break;
    }
    // Held whitespace survives only when no call block was ever seen.
    content_.finish(d.content, !seen_block_);
    buf_.clear();
    return d;
  }

  bool saw_calls() const override { return n_calls_ > 0; }

 private:
  enum class St { kContent, kName, kInvalidText, kSkipBlock, kScan, kKey, kAfterKey, kValue, kAfterCall };

  void close_value(ToolStreamDelta& d, std::string_view rest) {
    if (!val_dup_) {
      if (val_is_string_) {
        emit_args(d, json_escape(rest) + "\"");
      } else {
        val_buf_.append(rest);
        emit_args(d, dump_json_py(convert_value(val_buf_, false)));
      }
    }
    val_buf_.clear();
  }

  void close_call(ToolStreamDelta& d) { emit_args(d, keys_.empty() ? "{}" : "}"); }

  void emit_args(ToolStreamDelta& d, std::string frag) {
    if (frag.empty()) return;
    if (!d.calls.empty() && d.calls.back().index == n_calls_ - 1 && !d.calls.back().first) {
      d.calls.back().arguments += frag;
      return;
    }
    d.calls.push_back(ToolCallDelta{n_calls_ - 1, false, "", std::move(frag)});
  }

  // Advances the state machine over buf_ as far as the text allows.
  void run(ToolStreamDelta& d, bool final) {
    for (;;) {
      switch (st_) {
        case St::kContent:
          if (!content_.until_open(buf_, final, d.content)) return;
          st_ = St::kName;
          break;
        case St::kAfterCall:  // text between or after calls is dropped (rule 6)
          if (!content_.until_open(buf_, final, d.content, /*drop=*/true)) return;
          st_ = St::kName;
          break;
        case St::kName: {
          size_t i = 0;
          while (i < buf_.size() && is_ws(buf_[i])) ++i;
          if (i == buf_.size()) return;  // only whitespace so far: cannot have started the name
          size_t ne = std::min({buf_.find(kKey, i), buf_.find('\n', i), buf_.find(kClose, i)});
          if (ne == std::string::npos) return;  // name not complete yet
          std::string name(trim_space(std::string_view(buf_).substr(i, ne - i)));
          if (!name.empty() && !schemas_.accepts(name)) {
            // Not a call (ToolSchemas::accepts): before the first real block it is content, verbatim.
            if (seen_block_) {
              buf_.erase(0, ne);
              st_ = St::kSkipBlock;
              break;
            }
            content_.emit(d.content, std::string(kOpen) + buf_.substr(0, ne));
            buf_.erase(0, ne);
            st_ = St::kInvalidText;
            break;
          }
          seen_block_ = true;
          buf_.erase(0, ne);
          if (name.empty()) {
            st_ = St::kSkipBlock;
            break;
          }
          name_ = std::move(name);
          keys_.clear();
          d.calls.push_back(ToolCallDelta{n_calls_++, true, name_, ""});
          st_ = St::kScan;
          break;
        }
        case St::kInvalidText: {  // the rest of a non-call block, up to and with its </tool_call>
          size_t e = buf_.find(kClose);
          size_t take =
              e == std::string::npos ? buf_.size() - partial_tag_suffix(buf_, {kClose}) : e + kClose.size();
          content_.emit(d.content, std::string_view(buf_).substr(0, take));
          buf_.erase(0, take);
          if (e == std::string::npos) return;
          st_ = St::kContent;
          break;
        }
        case St::kSkipBlock: {
          size_t e = buf_.find(kClose);
          if (e == std::string::npos) {
            size_t hold = partial_tag_suffix(buf_, {kClose});
            buf_.erase(0, buf_.size() - hold);
            return;
          }
          buf_.erase(0, e + kClose.size());
          st_ = St::kAfterCall;
          break;
        }
        case St::kScan: {
          size_t k = buf_.find(kKey), e = buf_.find(kClose);
          if (e != std::string::npos && (k == std::string::npos || e < k)) {
            close_call(d);
            buf_.erase(0, e + kClose.size());
            st_ = St::kAfterCall;
            break;
          }
          if (k == std::string::npos) {
            size_t hold = partial_tag_suffix(buf_, {kKey, kClose});
            buf_.erase(0, buf_.size() - hold);
            return;
          }
          buf_.erase(0, k + kKey.size());
          st_ = St::kKey;
          break;
        }
        case St::kKey: {
          size_t ke = buf_.find(kKeyEnd), e = buf_.find(kClose);
          if (e != std::string::npos && (ke == std::string::npos || e < ke)) {
            close_call(d);
            buf_.erase(0, e + kClose.size());
            st_ = St::kAfterCall;
            break;
          }
          if (ke == std::string::npos) return;
          key_ = std::string(trim_space(std::string_view(buf_).substr(0, ke)));
          buf_.erase(0, ke + kKeyEnd.size());
          st_ = St::kAfterKey;
          break;
        }
        case St::kAfterKey: {
          size_t i = 0;
          while (i < buf_.size() && is_ws(buf_[i])) ++i;
          buf_.erase(0, i);
          if (buf_.empty()) return;
          if (buf_.size() < kVal.size() && kVal.substr(0, buf_.size()) == buf_) return;
          if (buf_.compare(0, kVal.size(), kVal) != 0) {
            st_ = St::kScan;
            break;
          }
          buf_.erase(0, kVal.size());
          val_dup_ = !keys_.insert(key_).second;
          val_is_string_ = schemas_.is_string(name_, key_);
          val_buf_.clear();
          if (!val_dup_) emit_args(d, open_key(keys_.size() == 1, key_) + (val_is_string_ ? "\"" : ""));
          st_ = St::kValue;
          break;
        }
        case St::kValue: {
          size_t ve = buf_.find(kValEnd), e = buf_.find(kClose);
          if (ve == std::string::npos && e == std::string::npos) {
            size_t hold = partial_tag_suffix(buf_, {kValEnd, kClose});
            std::string_view safe = std::string_view(buf_).substr(0, buf_.size() - hold);
            if (!val_dup_) {
              if (val_is_string_)
                emit_args(d, json_escape(safe));
              else
                val_buf_.append(safe);
            }
            buf_.erase(0, safe.size());
            return;
          }
          if (ve != std::string::npos && (e == std::string::npos || ve < e)) {
            close_value(d, std::string_view(buf_).substr(0, ve));
            buf_.erase(0, ve + kValEnd.size());
            st_ = St::kScan;
            break;
          }
          close_value(d, std::string_view(buf_).substr(0, e));
          close_call(d);
          buf_.erase(0, e + kClose.size());
          st_ = St::kAfterCall;
          break;
        }
      }
    }
  }

  ToolSchemas schemas_;
  St st_ = St::kContent;
  ContentStream content_;
  std::string buf_;
  bool seen_block_ = false;
  int n_calls_ = 0;
  std::string name_, key_, val_buf_;
  std::set<std::string> keys_;
  bool val_dup_ = false, val_is_string_ = false;
};

}  // namespace

std::unique_ptr<ToolStreamParser> make_poolside_stream_parser(ToolSchemas schemas) {
  return std::make_unique<PoolsideStream>(std::move(schemas));
}

}  // namespace gridq::text

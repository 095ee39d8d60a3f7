#include "text/tool_parser_json.h"

namespace gridq::text {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::optional<ParsedToolCall> parse_block(std::string_view body, const ToolSchemas& schemas) {
  std::string_view t = trim_space(body);
  // Depth guard before handing model output to the parser.
  int depth = 0, max_depth = 0;
  for (char c : t) {
    if (c == '{' || c == '[')
      max_depth = std::max(max_depth, ++depth);
    else if (c == '}' || c == ']')
      --depth;
  }
  if (max_depth > 64) return std::nullopt;
  auto j = nlohmann::ordered_json::parse(t.begin(), t.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto n = j.find("name");
  if (n == j.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return std::nullopt;
  if (!schemas.accepts(n->get_ref<const std::string&>())) return std::nullopt;
  auto a = j.find("arguments");
  if (a == j.end()) a = j.find("parameters");
  if (a == j.end() || !a->is_object()) return std::nullopt;
  return ParsedToolCall{n->get<std::string>(), dump_json_py(*a)};
}

}  // namespace

ToolParseResult parse_json_tool_calls(std::string_view text, const ToolSchemas& schemas) {
  ToolParseResult r;
  std::string content;
  size_t p = 0;
  for (;;) {
    size_t s = text.find(kOpen, p);
    if (s == std::string_view::npos) break;
    size_t e = text.find(kClose, s + kOpen.size());
    if (e == std::string_view::npos) break;
    content.append(text.substr(p, s - p));
    if (auto c = parse_block(text.substr(s + kOpen.size(), e - s - kOpen.size()), schemas)) {
      r.calls.push_back(std::move(*c));
    } else {
      content.append(text.substr(s, e + kClose.size() - s));
    }
    p = e + kClose.size();
  }
  content.append(text.substr(p));
  if (!content.empty() && !(is_all_space(content) && !r.calls.empty())) r.content = std::move(content);
  return r;
}

namespace {

class JsonStream final : public ToolStreamParser {
 public:
  explicit JsonStream(ToolSchemas s) : schemas_(std::move(s)) {}
  ToolStreamDelta feed(std::string_view text) override {
    buf_.append(text);
    ToolStreamDelta d;
    run(d);
    return d;
  }
  ToolStreamDelta finish() override {
    ToolStreamDelta d;
    // An unterminated block stays in content verbatim, its opening tag included.
    content_.emit(d.content, in_block_ ? std::string(kOpen) + buf_ : buf_);
    buf_.clear();
    in_block_ = false;
    content_.finish(d.content, n_calls_ == 0);
    return d;
  }
  bool saw_calls() const override { return n_calls_ > 0; }

 private:
  void run(ToolStreamDelta& d) {
    for (;;) {
      if (!in_block_) {
        if (!content_.until_open(buf_, false, d.content)) return;
        in_block_ = true;
      }
      size_t e = buf_.find(kClose);
      if (e == std::string::npos) return;
      if (auto c = parse_block(std::string_view(buf_).substr(0, e), schemas_)) {
        d.calls.push_back(ToolCallDelta{n_calls_, true, c->name, ""});
        d.calls.push_back(ToolCallDelta{n_calls_, false, "", c->arguments});
        ++n_calls_;
      } else {
        content_.emit(d.content, std::string(kOpen) + buf_.substr(0, e + kClose.size()));
      }
      buf_.erase(0, e + kClose.size());
      in_block_ = false;
    }
  }

  ToolSchemas schemas_;
  ContentStream content_;
  std::string buf_;
  bool in_block_ = false;
  int n_calls_ = 0;
};

}  // namespace

std::unique_ptr<ToolStreamParser> make_json_stream_parser(ToolSchemas schemas) {
  return std::make_unique<JsonStream>(std::move(schemas));
}

}  // namespace gridq::text

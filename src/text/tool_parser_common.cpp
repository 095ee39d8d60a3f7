#include "text/tool_parser_common.h"

#include <cstdio>

namespace gridq::text {

bool ToolSchemas::is_string(std::string_view tool, std::string_view key) const {
  auto it = string_args.find(tool);
  if (it == string_args.end()) return false;
  return it->second.count(std::string(key)) > 0;
}

bool ToolSchemas::accepts(std::string_view name) const {
  for (std::string_view marker : {"<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>"})
    if (name.find(marker) != std::string_view::npos) return false;
  return !closed || names.find(name) != names.end();
}

namespace {
bool type_is_string(const nlohmann::json& t) {
  if (t.is_string()) return t.get<std::string>() == "string";
  if (t.is_array()) {  // ["string", "null"] is still a string slot
    bool has_string = false;
    for (const auto& e : t) {
      if (!e.is_string()) return false;
      const auto& s = e.get_ref<const std::string&>();
      if (s == "string")
        has_string = true;
      else if (s != "null")
        return false;
    }
    return has_string;
  }
  return false;
}
}  // namespace

ToolSchemas tool_schemas_from_openai(const nlohmann::json& tools) {
  ToolSchemas out;
  if (!tools.is_array()) return out;
  out.closed = true;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    auto fit = t.find("function");
    if (fit == t.end() || !fit->is_object()) continue;
    auto nit = fit->find("name");
    if (nit == fit->end() || !nit->is_string()) continue;
    out.names.insert(nit->get<std::string>());
    auto& keys = out.string_args[nit->get<std::string>()];
    auto pit = fit->find("parameters");
    if (pit == fit->end() || !pit->is_object()) continue;
    auto props = pit->find("properties");
    if (props == pit->end() || !props->is_object()) continue;
    for (auto it = props->begin(); it != props->end(); ++it) {
      if (!it.value().is_object()) continue;
      auto ty = it.value().find("type");
      if (ty != it.value().end() && type_is_string(*ty)) keys.insert(it.key());
    }
  }
  return out;
}

ToolParseResult apply_filter(ToolParseResult r, const ToolCallFilter& f) {
  std::vector<ParsedToolCall> kept;
  for (auto& c : r.calls) {
    if (f.only_name && c.name != *f.only_name) continue;
    if (!f.parallel && !kept.empty()) break;
    kept.push_back(std::move(c));
  }
  r.calls = std::move(kept);
  return r;
}

namespace {
class FilteredParser final : public ToolStreamParser {
 public:
  FilteredParser(std::unique_ptr<ToolStreamParser> inner, ToolCallFilter f)
      : inner_(std::move(inner)), f_(std::move(f)) {}
  ToolStreamDelta feed(std::string_view text) override { return map(inner_->feed(text)); }
  ToolStreamDelta finish() override { return map(inner_->finish()); }
  bool saw_calls() const override { return next_ > 0; }

 private:
  ToolStreamDelta map(ToolStreamDelta d) {
    std::vector<ToolCallDelta> out;
    for (auto& c : d.calls) {
      if (c.first) {
        bool keep = (!f_.only_name || c.name == *f_.only_name) && (f_.parallel || next_ == 0);
        index_map_[c.index] = keep ? next_++ : -1;
      }
      auto it = index_map_.find(c.index);
      if (it == index_map_.end() || it->second < 0) continue;
      c.index = it->second;
      out.push_back(std::move(c));
    }
    d.calls = std::move(out);
    return d;
  }
  std::unique_ptr<ToolStreamParser> inner_;
  ToolCallFilter f_;
  std::map<int, int> index_map_;
  int next_ = 0;
};
}  // namespace

std::unique_ptr<ToolStreamParser> filtered(std::unique_ptr<ToolStreamParser> inner, ToolCallFilter f) {
  return std::make_unique<FilteredParser>(std::move(inner), std::move(f));
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

namespace {
void dump_into(const nlohmann::ordered_json& j, std::string& out) {
  switch (j.type()) {
    case nlohmann::json::value_t::string:
      out += '"';
      out += json_escape(j.get_ref<const std::string&>());
      out += '"';
      return;
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : j) {
        if (!first) out += ", ";
        first = false;
        dump_into(e, out);
      }
      out += ']';
      return;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        out += json_escape(it.key());
        out += "\": ";
        dump_into(it.value(), out);
      }
      out += '}';
      return;
    }
    default:
      out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}
}  // namespace

std::string dump_json_py(const nlohmann::ordered_json& j) {
  std::string out;
  dump_into(j, out);
  return out;
}

bool is_all_space(std::string_view s) {
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

std::string_view trim_space(std::string_view s) {
  auto sp = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && sp(s.front())) s.remove_prefix(1);
  while (!s.empty() && sp(s.back())) s.remove_suffix(1);
  return s;
}

size_t partial_tag_suffix(std::string_view buf, std::initializer_list<std::string_view> tags) {
  size_t best = 0;
  for (auto tag : tags) {
    size_t maxlen = std::min(buf.size(), tag.size() - 1);
    for (size_t len = maxlen; len > best; --len) {
      if (buf.substr(buf.size() - len) == tag.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

void ContentStream::emit(std::string& out, std::string_view s) {
  if (s.empty()) return;
  if (!emitted_) {
    if (is_all_space(s)) {
      pending_ws_.append(s);
      return;
    }
    out += pending_ws_;
    pending_ws_.clear();
    emitted_ = true;
  }
  out.append(s);
}

bool ContentStream::until_open(std::string& buf, bool final, std::string& out, bool drop) {
  static constexpr std::string_view kOpen = "<tool_call>";
  const size_t s = buf.find(kOpen);
  const size_t take =
      s != std::string::npos ? s : buf.size() - (final ? 0 : partial_tag_suffix(buf, {kOpen}));
  if (!drop) emit(out, std::string_view(buf).substr(0, take));
  buf.erase(0, s != std::string::npos ? s + kOpen.size() : take);
  return s != std::string::npos;
}

void ContentStream::finish(std::string& out, bool keep_space) {
  if (keep_space) out += pending_ws_;
  pending_ws_.clear();
}

}  // namespace gridq::text

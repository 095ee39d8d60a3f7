#include "serve/openai_protocol.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "serve/openai_fields.h"

namespace gridq::serve {

ApiError invalid(std::string param, std::string message, std::string code) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

ojson error_json(const ApiError& e) {
  ojson inner = ojson::object();
  inner["message"] = e.message;
  inner["type"] = e.type;
  inner["param"] = e.param.empty() ? ojson(nullptr) : ojson(e.param);
  inner["code"] = e.code.empty() ? ojson(nullptr) : ojson(e.code);
  ojson out = ojson::object();
  out["error"] = std::move(inner);
  return out;
}

std::string error_body(const ApiError& e) { return dump(error_json(e)); }

namespace {
struct Violation {
  std::string message;
};
}  // namespace

std::variant<ojson, ApiError> parse_body_json(std::string_view body, int max_depth) {
  if (body.find('\0') != std::string_view::npos) return invalid("", "request body contains a NUL byte");
  // Depth is checked before parsing so a 10^5-deep body never builds a deep tree.
  {
    int depth = 0;
    bool in_str = false, esc = false;
    for (char c : body) {
      if (in_str) {
        if (esc)
          esc = false;
        else if (c == '\\')
          esc = true;
        else if (c == '"')
          in_str = false;
        continue;
      }
      if (c == '"')
        in_str = true;
      else if (c == '{' || c == '[') {
        if (++depth > max_depth)
          return invalid("", fmt::format("request body nests JSON deeper than {} levels", max_depth));
      } else if (c == '}' || c == ']') {
        --depth;
      }
    }
  }
  std::vector<std::set<std::string>> keys;
  auto cb = [&](int, ojson::parse_event_t ev, ojson& parsed) -> bool {
    using E = ojson::parse_event_t;
    if (ev == E::object_start)
      keys.emplace_back();
    else if (ev == E::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == E::key && !keys.empty()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second)
        throw Violation{fmt::format("duplicate key \"{}\" in request body", k)};
    }
    return true;
  };
  try {
    return ojson::parse(body.begin(), body.end(), cb, true);
  } catch (const Violation& v) {
    return invalid("", v.message);
  } catch (const nlohmann::json::exception& e) {
    return invalid("", fmt::format("request body is not valid JSON: {}", e.what()));
  }
}

namespace fields {

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "a list";
    case ojson::value_t::object:
      return "an object";
    case ojson::value_t::number_float:
      return "a float";
    default:
      return "an integer";
  }
}

std::optional<ApiError> get_int(const ojson& b, const char* key, int64_t lo, int64_t hi,
                                std::optional<int64_t>& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned()) {
    // The JSON parser stores every non-negative literal as unsigned (0 included), so both bounds apply
    // here too: `max_tokens: 0` must fail the lower bound like -1 does.
    uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      return invalid(key, fmt::format("{} must be an integer in [{}, {}], got {}", key, lo, hi, u));
    out = static_cast<int64_t>(u);
  } else if (it->is_number_integer()) {
    int64_t v = it->get<int64_t>();
    if (v < lo || v > hi)
      return invalid(key, fmt::format("{} must be an integer in [{}, {}], got {}", key, lo, hi, v));
    out = v;
  } else {
    return invalid(key, fmt::format("{} must be an integer, got {}", key, type_name(*it)));
  }
  return std::nullopt;
}

std::optional<ApiError> get_num(const ojson& b, const char* key, double lo, double hi, bool lo_open,
                                std::optional<double>& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return invalid(key, fmt::format("{} must be a number, got {}", key, type_name(*it)));
  double v = it->get<double>();
  if (!std::isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
    return invalid(key, fmt::format("{} must be in {}{}, {}], got {}", key, lo_open ? "(" : "[", lo, hi, v));
  out = v;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const ojson& b, const char* key, bool& out) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return invalid(key, fmt::format("{} must be a boolean, got {}", key, type_name(*it)));
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> get_model(const ojson& b, std::string& model) {
  auto it = b.find("model");
  if (it == b.end() || it->is_null()) return invalid("model", "model is required");
  if (!it->is_string())
    return invalid("model", fmt::format("model must be a string, got {}", type_name(*it)));
  model = it->get<std::string>();
  return std::nullopt;
}

}  // namespace fields

std::variant<int64_t, ApiError> resolve_max_tokens(int64_t prompt_tokens,
                                                   const std::optional<int64_t>& requested,
                                                   int64_t max_model_len, int64_t absent_default) {
  const int64_t room = max_model_len - prompt_tokens;
  if (room <= 0) {
    auto e =
        invalid("messages",
                fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens, "
                            "which leaves no room for a completion.",
                            max_model_len, prompt_tokens),
                "context_length_exceeded");
    return e;
  }
  if (requested) {
    if (*requested > room)
      return invalid(
          "max_tokens",
          fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens and "
                      "max_completion_tokens asks for {} more.",
                      max_model_len, prompt_tokens, *requested),
          "context_length_exceeded");
    return *requested;
  }
  if (absent_default < 0) return room;
  return std::min(absent_default, room);
}

}  // namespace gridq::serve

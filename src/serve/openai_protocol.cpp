#include "serve/openai_protocol.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>

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

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

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

// Integer fields reject floats, bools and strings (T8). null means absent: the OpenAI schema marks every
// optional integer nullable and clients send it (LangChain's completions client sends "seed": null).
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

// Number fields accept int or float; null means absent.
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

#define GQ_TRY(expr)                  \
  do {                                \
    if (auto _e = (expr)) return *_e; \
  } while (0)

std::optional<ApiError> parse_gen(const ojson& b, const Limits& lim, bool chat, GenParams& g) {
  std::optional<int64_t> i;
  std::optional<double> d;
  // max_completion_tokens wins over the deprecated max_tokens when both are given.
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(k) == "max_completion_tokens") continue;
    i.reset();
    // Completions take 0 too, for prompt scoring with echo (checked with echo in parse_completion_request).
    GQ_TRY(get_int(b, k, chat ? 1 : 0, kInt32Max, i));
    if (i) g.max_tokens = i;
  }
  GQ_TRY(get_num(b, "temperature", 0.0, 2.0, false, d));
  if (d) g.sampling.temperature = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, "top_p", 0.0, 1.0, true, d));
  if (d) g.sampling.top_p = static_cast<float>(*d);
  i.reset();
  GQ_TRY(get_int(b, "top_k", -1, kInt32Max, i));
  if (i) g.sampling.top_k = static_cast<int32_t>(*i);
  d.reset();
  GQ_TRY(get_num(b, "min_p", 0.0, 1.0, false, d));
  if (d) g.sampling.min_p = static_cast<float>(*d);
  i.reset();
  GQ_TRY(get_int(b, "n", 1, 16, i));
  if (i) g.n = static_cast<int>(*i);
  d.reset();
  GQ_TRY(get_num(b, "presence_penalty", -2.0, 2.0, false, d));
  if (d) g.sampling.presence_penalty = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, "frequency_penalty", -2.0, 2.0, false, d));
  if (d) g.sampling.frequency_penalty = static_cast<float>(*d);
  d.reset();
  GQ_TRY(get_num(b, "repetition_penalty", 0.0, 100.0, true, d));
  if (d) g.sampling.repetition_penalty = static_cast<float>(*d);
  // The sampler takes fp32: a positive value that narrows to 0 would divide by zero.
  if (d && g.sampling.repetition_penalty <= 0.0f)
    return invalid("repetition_penalty", fmt::format("repetition_penalty {} is below the fp32 range", *d));
  i.reset();
  GQ_TRY(get_int(b, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), i));
  if (i) g.seed = i;
  i.reset();
  GQ_TRY(get_int(b, "min_tokens", 0, kInt32Max, i));
  if (i) g.min_tokens = *i;
  if (g.max_tokens && g.min_tokens > *g.max_tokens)
    return invalid("min_tokens", "min_tokens must not exceed max_tokens");
  GQ_TRY(get_bool(b, "ignore_eos", g.ignore_eos));
  GQ_TRY(get_bool(b, "skip_special_tokens", g.skip_special_tokens));
  GQ_TRY(get_bool(b, "include_stop_str_in_output", g.include_stop_str_in_output));
  GQ_TRY(get_bool(b, "allow_special_tokens", g.allow_special_tokens));

  if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
    if (it->is_string()) {
      if (it->get_ref<const std::string&>().empty()) return invalid("stop", "stop strings must be non-empty");
      g.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > 16) return invalid("stop", "stop allows at most 16 strings");
      for (const auto& s : *it) {
        if (!s.is_string() || s.get_ref<const std::string&>().empty())
          return invalid("stop", "stop must be a string or a list of non-empty strings");
        g.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid("stop",
                     fmt::format("stop must be a string or a list of strings, got {}", type_name(*it)));
    }
  }
  if (auto it = b.find("stop_token_ids"); it != b.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > 1024)
      return invalid("stop_token_ids", "stop_token_ids must be a list of token ids");
    for (const auto& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= lim.vocab_size)
        return invalid("stop_token_ids",
                       fmt::format("stop_token_ids entries must be token ids in [0, {})", lim.vocab_size));
      g.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return invalid("logit_bias", "logit_bias must be an object of token id -> bias");
    if (it->size() > 1024) return invalid("logit_bias", "logit_bias allows at most 1024 entries");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      const std::string& k = kv.key();
      int64_t id = -1;
      bool digits = !k.empty() && k.size() <= 10;
      for (char c : k) digits = digits && c >= '0' && c <= '9';
      if (digits) id = std::stoll(k);
      if (!digits || id >= lim.vocab_size)
        return invalid("logit_bias",
                       fmt::format("logit_bias key \"{}\" is not a token id in [0, {})", k, lim.vocab_size));
      if (!kv.value().is_number() || kv.value().get<double>() < -100.0 || kv.value().get<double>() > 100.0)
        return invalid("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      g.sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(kv.value().get<double>());
    }
  }
  if (chat) {
    GQ_TRY(get_bool(b, "logprobs", g.logprobs));
    if (auto it = b.find("top_logprobs"); it != b.end() && !it->is_null()) {
      i.reset();
      GQ_TRY(get_int(b, "top_logprobs", 0, 20, i));
      if (!g.logprobs) return invalid("top_logprobs", "top_logprobs is only allowed when logprobs is true");
      g.top_logprobs = static_cast<int>(*i);
    }
  } else {
    if (auto it = b.find("logprobs"); it != b.end() && !it->is_null()) {
      i.reset();
      GQ_TRY(get_int(b, "logprobs", 0, 5, i));
      g.logprobs = true;
      g.top_logprobs = static_cast<int>(*i);
    }
  }
  GQ_TRY(parse_structured(b, g.grammar));
  GQ_TRY(get_bool(b, "stream", g.stream));
  if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
    if (!g.stream) return invalid("stream_options", "stream_options is only allowed when stream is true");
    if (!it->is_object()) return invalid("stream_options", "stream_options must be an object");
    if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean())
        return invalid("stream_options", "stream_options.include_usage must be a boolean");
      g.include_usage = u->get<bool>();
    }
  }
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

// Text of a content field: a string, or a list of {"type":"text","text":...} parts.
std::optional<ApiError> content_text(const ojson& c, const std::string& param, bool allow_null,
                                     std::optional<std::string>& out) {
  if (c.is_null()) {
    if (!allow_null) return invalid(param, fmt::format("{} is required", param));
    return std::nullopt;
  }
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return invalid(param, fmt::format("{} must be a string or a list of text parts", param));
  std::string s;
  for (size_t j = 0; j < c.size(); ++j) {
    const auto& part = c[j];
    std::string pp = fmt::format("{}[{}]", param, j);
    if (!part.is_object()) return invalid(pp, fmt::format("{} must be an object", pp));
    auto ty = part.find("type");
    if (ty == part.end() || !ty->is_string() || *ty != "text")
      return invalid(pp + ".type", fmt::format("{}.type: only \"text\" content parts are supported", pp));
    auto tx = part.find("text");
    if (tx == part.end() || !tx->is_string())
      return invalid(pp + ".text", fmt::format("{}.text must be a string", pp));
    s += tx->get_ref<const std::string&>();
  }
  out = std::move(s);
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const ojson& b, const Limits& lim, ojson& out) {
  auto it = b.find("messages");
  if (it == b.end() || it->is_null()) return invalid("messages", "messages is required");
  if (!it->is_array()) return invalid("messages", "messages must be a list");
  if (it->empty()) return invalid("messages", "messages must not be empty");
  if (it->size() > lim.max_messages)
    return invalid("messages", fmt::format("messages allows at most {} entries", lim.max_messages));
  out = ojson::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) return invalid(p, fmt::format("{} must be an object", p));
    auto r = m.find("role");
    if (r == m.end() || !r->is_string()) return invalid(p + ".role", fmt::format("{}.role is required", p));
    std::string role = r->get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      return invalid(p + ".role",
                     fmt::format("{}.role \"{}\" is not one of system, developer, user, assistant, tool", p,
                                 r->get<std::string>()));
    if (auto fc = m.find("function_call"); fc != m.end() && !fc->is_null())
      return invalid(
          p + ".function_call",
          fmt::format("{}.function_call (legacy function calling) is not supported; use tool_calls", p),
          "unsupported_parameter");
    if (role == "tool") {
      // The result must say which call it answers (OpenAI and vLLM require it).
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string() || id->get_ref<const std::string&>().empty())
        return invalid(p + ".tool_call_id", fmt::format("{}.tool_call_id is required for a tool message", p));
    }
    ojson nm = ojson::object();
    nm["role"] = role;
    auto c = m.find("content");
    const ojson& cv = c == m.end() ? ojson(nullptr) : *c;
    std::optional<std::string> text;
    GQ_TRY(content_text(cv, p + ".content", role == "assistant", text));
    nm["content"] = text ? ojson(*text) : ojson("");
    if (role == "assistant") {
      for (const char* rk : {"reasoning_content", "reasoning"}) {
        auto rc = m.find(rk);
        if (rc == m.end() || rc->is_null()) continue;
        if (!rc->is_string()) return invalid(p + "." + rk, fmt::format("{}.{} must be a string", p, rk));
        if (!nm.contains("reasoning_content")) nm["reasoning_content"] = *rc;
      }
      auto tc = m.find("tool_calls");
      if (tc != m.end() && !tc->is_null()) {
        if (!tc->is_array())
          return invalid(p + ".tool_calls", fmt::format("{}.tool_calls must be a list", p));
        ojson calls = ojson::array();
        for (size_t k = 0; k < tc->size(); ++k) {
          const auto& call = (*tc)[k];
          std::string cp = fmt::format("{}.tool_calls[{}]", p, k);
          if (!call.is_object()) return invalid(cp, cp + " must be an object");
          auto fn = call.find("function");
          if (fn == call.end() || !fn->is_object())
            return invalid(cp + ".function", cp + ".function is required");
          auto name = fn->find("name");
          if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
            return invalid(cp + ".function.name", cp + ".function.name must be a non-empty string");
          auto args = fn->find("arguments");
          ojson obj = ojson::object();
          if (args != fn->end() && !args->is_null()) {
            if (!args->is_string())
              return invalid(cp + ".function.arguments",
                             cp + ".function.arguments must be a string holding a JSON object");
            auto parsed = parse_body_json(args->get_ref<const std::string&>(), 64);
            if (auto* e = std::get_if<ApiError>(&parsed); e || !std::get<ojson>(parsed).is_object())
              return invalid(cp + ".function.arguments",
                             cp + ".function.arguments must be a string holding a JSON object");
            obj = std::move(std::get<ojson>(parsed));
          }
          ojson f = ojson::object();
          f["name"] = *name;
          f["arguments"] = std::move(obj);
          ojson nc = ojson::object();
          nc["type"] = "function";
          nc["function"] = std::move(f);
          calls.push_back(std::move(nc));
        }
        if (!calls.empty()) nm["tool_calls"] = std::move(calls);
      }
    }
    out.push_back(std::move(nm));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson& b, const Limits& lim, ChatRequest& r) {
  // The deprecated `functions`/`function_call` would otherwise be ignored silently and the model answer
  // without the functions it was given.
  for (const char* legacy : {"functions", "function_call"}) {
    if (auto f = b.find(legacy); f != b.end() && !f->is_null())
      return invalid(
          legacy,
          fmt::format("{} (legacy function calling) is not supported; use tools and tool_choice", legacy),
          "unsupported_parameter");
  }
  auto it = b.find("tools");
  bool have_tools = it != b.end() && !it->is_null();
  if (have_tools) {
    if (!it->is_array()) return invalid("tools", "tools must be a list");
    if (it->empty()) return invalid("tools", "tools must not be an empty list (leave it out instead)");
    if (it->size() > lim.max_tools)
      return invalid("tools", fmt::format("tools allows at most {} entries", lim.max_tools));
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& t = (*it)[i];
      std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) return invalid(p, p + " must be an object");
      auto ty = t.find("type");
      if (ty == t.end() || !ty->is_string() || *ty != "function")
        return invalid(p + ".type", p + ".type must be \"function\"");
      auto fn = t.find("function");
      if (fn == t.end() || !fn->is_object())
        return invalid(p + ".function", p + ".function must be an object");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
        return invalid(p + ".function.name", p + ".function.name must be a non-empty string");
      auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null() && !params->is_object())
        return invalid(p + ".function.parameters", p + ".function.parameters must be a JSON schema object");
    }
  }
  r.tool_choice = ToolChoice::kAuto;
  auto tc = b.find("tool_choice");
  if (tc != b.end() && !tc->is_null()) {
    if (tc->is_string()) {
      const auto& s = tc->get_ref<const std::string&>();
      if (s == "none")
        r.tool_choice = ToolChoice::kNone;
      else if (s == "auto")
        r.tool_choice = ToolChoice::kAuto;
      else if (s == "required")
        r.tool_choice = ToolChoice::kRequired;
      else
        return invalid("tool_choice", "tool_choice must be none, auto, required or a named function");
    } else if (tc->is_object()) {
      auto ty = tc->find("type");
      auto fn = tc->find("function");
      if (ty == tc->end() || *ty != "function" || fn == tc->end() || !fn->is_object() ||
          !fn->contains("name") || !(*fn)["name"].is_string())
        return invalid("tool_choice",
                       "a named tool_choice is {\"type\":\"function\",\"function\":{\"name\":...}}");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = (*fn)["name"].get<std::string>();
    } else {
      return invalid("tool_choice", "tool_choice must be a string or an object");
    }
    if (r.tool_choice != ToolChoice::kNone && !have_tools)
      return invalid("tool_choice", "tool_choice other than \"none\" needs tools");
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const auto& t : *it) found = found || t["function"]["name"] == r.tool_choice_name;
    if (!found)
      return invalid("tool_choice",
                     fmt::format("tool_choice names \"{}\", which is not in tools", r.tool_choice_name));
  }
  GQ_TRY(get_bool(b, "parallel_tool_calls", r.parallel_tool_calls));
  if (have_tools && r.tool_choice != ToolChoice::kNone) {
    r.tools = *it;
    r.tools_for_parser = *it;
  } else {
    r.tools = nullptr;
    r.tools_for_parser = nullptr;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_thinking(const ojson& b, ChatRequest& r) {
  if (auto it = b.find("reasoning_effort"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) return invalid("reasoning_effort", "reasoning_effort must be a string");
    const auto& s = it->get_ref<const std::string&>();
    if (s == "none" || s == "no_think")
      r.enable_thinking = false;
    else if (s == "minimal" || s == "low" || s == "medium" || s == "high" || s == "xhigh" || s == "max")
      r.enable_thinking = true;
    else
      return invalid(
          "reasoning_effort",
          "reasoning_effort must be one of none, no_think, minimal, low, medium, high, xhigh, max");
  }
  if (auto it = b.find("chat_template_kwargs"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return invalid("chat_template_kwargs", "chat_template_kwargs must be an object");
    for (auto kv = it->begin(); kv != it->end(); ++kv) {
      const std::string& k = kv.key();
      if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "bos_token" ||
          k == "eos_token")
        return invalid("chat_template_kwargs", fmt::format("chat_template_kwargs may not set \"{}\"", k));
      if (k == "enable_thinking" || k == "thinking") {
        if (!kv.value().is_boolean())
          return invalid("chat_template_kwargs", fmt::format("chat_template_kwargs.{} must be a boolean", k));
        continue;
      }
      r.template_kwargs[k] = kv.value();
    }
    // enable_thinking outranks its alias `thinking`; both outrank reasoning_effort.
    if (auto t = it->find("thinking"); t != it->end()) r.enable_thinking = t->get<bool>();
    if (auto t = it->find("enable_thinking"); t != it->end()) r.enable_thinking = t->get<bool>();
  }
  GQ_TRY(get_bool(b, "include_reasoning", r.include_reasoning));
  return std::nullopt;
}

}  // namespace

std::variant<ChatRequest, ApiError> parse_chat_request(const ojson& b, const Limits& lim) {
  if (!b.is_object()) return invalid("", "request body must be a JSON object");
  ChatRequest r;
  GQ_TRY(get_model(b, r.model));
  GQ_TRY(parse_messages(b, lim, r.messages));
  GQ_TRY(parse_tools(b, lim, r));
  GQ_TRY(parse_thinking(b, r));
  GQ_TRY(parse_gen(b, lim, true, r.gen));
  if (r.gen.grammar && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
    return invalid(r.gen.grammar->param,
                   fmt::format("{} cannot be combined with tool_choice \"required\" or a named function: "
                               "both decide what the output is",
                               r.gen.grammar->param));
  bool agp_given = b.contains("add_generation_prompt") && !b["add_generation_prompt"].is_null();
  GQ_TRY(get_bool(b, "add_generation_prompt", r.add_generation_prompt));
  GQ_TRY(get_bool(b, "continue_final_message", r.continue_final_message));
  if (r.continue_final_message) {
    if (agp_given && r.add_generation_prompt)
      return invalid("continue_final_message",
                     "add_generation_prompt and continue_final_message cannot both be true");
    r.add_generation_prompt = false;
    if (r.messages.back()["role"] != "assistant")
      return invalid("continue_final_message", "continue_final_message needs a final assistant message");
  }
  return r;
}

std::variant<CompletionRequest, ApiError> parse_completion_request(const ojson& b, const Limits& lim) {
  if (!b.is_object()) return invalid("", "request body must be a JSON object");
  CompletionRequest r;
  GQ_TRY(get_model(b, r.model));
  auto it = b.find("prompt");
  if (it == b.end() || it->is_null()) return invalid("prompt", "prompt is required");
  auto ids_of = [&](const ojson& a, std::vector<int32_t>& out) -> std::optional<ApiError> {
    if (a.empty()) return invalid("prompt", "prompt token list must not be empty");
    for (const auto& t : a) {
      if (!t.is_number_integer()) return invalid("prompt", "prompt token ids must be integers");
      // Huge unsigned ids map to vocab_size so they fail the range check below.
      const bool huge = t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(kInt32Max);
      const int64_t v = huge ? static_cast<int64_t>(lim.vocab_size) : t.get<int64_t>();
      if (v < 0 || v >= lim.vocab_size)
        return invalid("prompt", fmt::format("prompt token id {} is out of vocabulary [0, {})", t.dump(),
                                             lim.vocab_size));
      out.push_back(static_cast<int32_t>(v));
    }
    return std::nullopt;
  };
  if (it->is_string()) {
    if (it->get_ref<const std::string&>().empty()) return invalid("prompt", "prompt must not be empty");
    r.prompts.emplace_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->empty()) return invalid("prompt", "prompt must not be empty");
    const auto& first = (*it)[0];
    if (first.is_number()) {  // one prompt of token ids: its length is checked against the context later
      std::vector<int32_t> ids;
      GQ_TRY(ids_of(*it, ids));
      r.prompts.emplace_back(std::move(ids));
    } else {
      if (it->size() > 64) return invalid("prompt", "at most 64 prompts per request");
      for (const auto& p : *it) {
        if (p.is_string()) {
          if (p.get_ref<const std::string&>().empty())
            return invalid("prompt", "prompt strings must not be empty");
          r.prompts.emplace_back(p.get<std::string>());
        } else if (p.is_array()) {
          std::vector<int32_t> ids;
          GQ_TRY(ids_of(p, ids));
          r.prompts.emplace_back(std::move(ids));
        } else {
          return invalid("prompt",
                         "prompt must be a string, a list of strings, token ids or lists of token ids");
        }
      }
    }
  } else {
    return invalid("prompt", "prompt must be a string, a list of strings, token ids or lists of token ids");
  }
  GQ_TRY(get_bool(b, "echo", r.echo));
  if (auto s = b.find("suffix"); s != b.end() && !s->is_null())
    return invalid("suffix", "suffix is not supported", "unsupported_parameter");
  GQ_TRY(parse_gen(b, lim, false, r.gen));
  // max_tokens 0 asks only for the echoed prompt and its logprobs (lm-evaluation-harness's loglikelihood
  // requests); without echo it would ask for nothing.
  if (r.gen.max_tokens && *r.gen.max_tokens == 0 && !r.echo)
    return invalid("max_tokens",
                   "max_tokens must be at least 1; 0 is allowed only with echo (prompt scoring)");
  if (auto bo = b.find("best_of"); bo != b.end() && !bo->is_null()) {
    std::optional<int64_t> v;
    GQ_TRY(get_int(b, "best_of", 1, 16, v));
    if (*v != r.gen.n)
      return invalid("best_of", "best_of other than n is not supported", "unsupported_parameter");
  }
  return r;
}

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

std::string random_id(std::string_view prefix, size_t n) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s(prefix);
  for (size_t i = 0; i < n; ++i) s += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
ojson lp_entry(const TokenLogprob& t) {
  ojson e = ojson::object();
  e["token"] = t.token;
  e["logprob"] = t.logprob;
  e["bytes"] = t.bytes;
  return e;
}
}  // namespace

ojson chat_logprobs_json(const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const auto& t : lps) {
    ojson e = lp_entry(t);
    ojson top = ojson::array();
    for (const auto& a : t.top) top.push_back(lp_entry(a));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  ojson out = ojson::object();
  out["content"] = std::move(content);
  out["refusal"] = nullptr;
  return out;
}

ojson completion_logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset_start) {
  ojson tokens = ojson::array(), tlp = ojson::array(), top = ojson::array(), off = ojson::array();
  size_t pos = text_offset_start;
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    off.push_back(pos);
    // Code points: every byte that does not continue a UTF-8 sequence starts one.
    for (unsigned char c : t.token) pos += (c & 0xC0) != 0x80;
    if (t.unscored) {
      tlp.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    tlp.push_back(t.logprob);
    ojson m = ojson::object();
    for (const auto& a : t.top)
      if (!m.contains(a.token)) m[a.token] = a.logprob;
    top.push_back(std::move(m));
  }
  ojson out = ojson::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(tlp);
  out["top_logprobs"] = std::move(top);
  out["text_offset"] = std::move(off);
  return out;
}

ojson usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  ojson u = ojson::object();
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  return u;
}

namespace {

// The fields every response and chunk object starts with, in OpenAI's order.
ojson object_head(const std::string& id, int64_t created, const std::string& model, const char* object) {
  ojson out = ojson::object();
  out["id"] = id;
  out["object"] = object;
  out["created"] = created;
  out["model"] = model;
  return out;
}

ojson response_json(ojson head, ojson choices, int64_t prompt_tokens, int64_t completion_tokens) {
  head["choices"] = std::move(choices);
  head["usage"] = usage_json(prompt_tokens, completion_tokens);
  return head;
}

// A chunk carrying one choice: finish_reason "" -> null (§4 rule 6), `usage: null` when the stream reports
// usage at its end (rule 7).
ojson one_choice_chunk(ojson head, ojson choice, const std::string& finish_reason, const ojson& logprobs,
                       bool include_usage_field) {
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(finish_reason);
  head["choices"] = ojson::array({std::move(choice)});
  if (include_usage_field) head["usage"] = nullptr;
  return head;
}

}  // namespace

ojson chat_response_json(const std::string& id, int64_t created, const std::string& model,
                         const std::vector<ChatChoiceOut>& choices, int64_t prompt_tokens,
                         int64_t completion_tokens, bool include_reasoning) {
  ojson cs = ojson::array();
  for (const auto& c : choices) {
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    const bool has_reasoning = include_reasoning && c.reasoning && !c.reasoning->empty();
    if (c.content && !c.content->empty())
      msg["content"] = *c.content;
    else if (!c.tool_calls.empty() || has_reasoning)
      msg["content"] = nullptr;
    else
      msg["content"] = "";
    if (include_reasoning) {
      msg["reasoning_content"] = has_reasoning ? ojson(*c.reasoning) : ojson(nullptr);
      msg["reasoning"] = has_reasoning ? ojson(*c.reasoning) : ojson(nullptr);
    }
    if (!c.tool_calls.empty()) {
      ojson tcs = ojson::array();
      for (const auto& t : c.tool_calls) {
        ojson fn = ojson::object();
        fn["name"] = t.name;
        fn["arguments"] = t.arguments;
        ojson tc = ojson::object();
        tc["id"] = t.id;
        tc["type"] = "function";
        tc["function"] = std::move(fn);
        tcs.push_back(std::move(tc));
      }
      msg["tool_calls"] = std::move(tcs);
    }
    ojson ch = ojson::object();
    ch["index"] = c.index;
    ch["message"] = std::move(msg);
    ch["logprobs"] = c.logprobs ? *c.logprobs : ojson(nullptr);
    ch["finish_reason"] = c.finish_reason;
    cs.push_back(std::move(ch));
  }
  return response_json(object_head(id, created, model, "chat.completion"), std::move(cs), prompt_tokens,
                       completion_tokens);
}

ojson completion_response_json(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<CompletionChoiceOut>& choices, int64_t prompt_tokens,
                               int64_t completion_tokens) {
  ojson cs = ojson::array();
  for (const auto& c : choices) {
    ojson ch = ojson::object();
    ch["index"] = c.index;
    ch["text"] = c.text;
    ch["logprobs"] = c.logprobs ? *c.logprobs : ojson(nullptr);
    ch["finish_reason"] = c.finish_reason;
    cs.push_back(std::move(ch));
  }
  return response_json(object_head(id, created, model, "text_completion"), std::move(cs), prompt_tokens,
                       completion_tokens);
}

std::string sse_event(const ojson& j) { return "data: " + dump(j) + "\n\n"; }

ojson chat_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                      const ojson& delta, const std::string& finish_reason, const ojson& logprobs,
                      bool include_usage_field) {
  ojson ch = ojson::object();
  ch["index"] = index;
  ch["delta"] = delta;
  return one_choice_chunk(object_head(id, created, model, "chat.completion.chunk"), std::move(ch),
                          finish_reason, logprobs, include_usage_field);
}

ojson completion_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                            const std::string& text, const std::string& finish_reason, const ojson& logprobs,
                            bool include_usage_field) {
  ojson ch = ojson::object();
  ch["index"] = index;
  ch["text"] = text;
  return one_choice_chunk(object_head(id, created, model, "text_completion"), std::move(ch), finish_reason,
                          logprobs, include_usage_field);
}

ojson usage_chunk_json(const std::string& id, int64_t created, const std::string& model, const char* object,
                       int64_t prompt_tokens, int64_t completion_tokens) {
  return response_json(object_head(id, created, model, object), ojson::array(), prompt_tokens,
                       completion_tokens);
}

}  // namespace gridq::serve

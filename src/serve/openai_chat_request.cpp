// /v1/chat/completions requests: the messages (normalized for the chat template), tools and tool_choice,
// and the thinking switches (reasoning_effort, chat_template_kwargs).
#include <fmt/format.h>

#include "serve/openai_fields.h"

namespace gridq::serve {

using namespace fields;

namespace {

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

}  // namespace gridq::serve

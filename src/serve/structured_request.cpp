// Structured-output request fields (docs/serving.md "Structured outputs"): OpenAI's response_format,
// vLLM's structured_outputs object and the older top-level guided_* fields, validated fail-closed. Inside
// the constraint objects an unknown key is a 400 (it could change what the output must be); a top-level
// field stays ignorable as everywhere else (api.md §2).
#include <fmt/format.h>

#include <array>
#include <string_view>

#include "serve/openai_protocol.h"

namespace gridq::serve {

namespace {

using grammar::InputKind;

bool given(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

// A JSON Schema given as an object, a boolean schema, or (vLLM) a string holding one.
std::optional<ApiError> schema_text(const ojson& v, const std::string& param, std::string& out) {
  if (v.is_object() || v.is_boolean()) {
    out = v.dump();
    return std::nullopt;
  }
  if (v.is_string()) {
    auto parsed = parse_body_json(v.get_ref<const std::string&>(), 300);
    if (auto* e = std::get_if<ApiError>(&parsed))
      return invalid(param, fmt::format("{} holds no JSON Schema: {}", param, e->message));
    if (!(std::get<ojson>(parsed).is_object() || std::get<ojson>(parsed).is_boolean()))
      return invalid(param,
                     fmt::format("{} must be a JSON Schema (an object, or a string holding one)", param));
    out = v.get<std::string>();
    return std::nullopt;
  }
  return invalid(param, fmt::format("{} must be a JSON Schema object", param));
}

std::optional<ApiError> nonempty_string(const ojson& v, const std::string& param, std::string& out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    return invalid(param, fmt::format("{} must be a non-empty string", param));
  out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> choice_list(const ojson& v, const std::string& param, std::string& out) {
  if (!v.is_array() || v.empty())
    return invalid(param, fmt::format("{} must be a non-empty list of strings", param));
  for (const auto& c : v)
    if (!c.is_string()) return invalid(param, fmt::format("{} must be a non-empty list of strings", param));
  out = v.dump();
  return std::nullopt;
}

std::optional<ApiError> optional_bool(const ojson& obj, const char* key, const std::string& param,
                                      std::optional<bool>& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return invalid(param, fmt::format("{} must be a boolean", param));
  out = it->get<bool>();
  return std::nullopt;
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {...}}.
std::optional<ApiError> from_response_format(const ojson& rf, std::optional<GrammarSpec>& out) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return invalid("response_format", "response_format must be an object {\"type\": ...}");
  const std::string& t = rf["type"].get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out = GrammarSpec{InputKind::kJsonObject, "", false, "response_format"};
    return std::nullopt;
  }
  if (t != "json_schema")
    return invalid(
        "response_format.type",
        fmt::format("response_format.type \"{}\" is not one of text, json_object, json_schema", t));
  const std::string p = "response_format.json_schema";
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    return invalid(p, p + " is required with type json_schema and must be an object {\"name\", \"schema\"}");
  for (auto kv = js->begin(); kv != js->end(); ++kv) {
    const std::string& k = kv.key();
    if (k != "name" && k != "schema" && k != "strict" && k != "description")
      return invalid(p, fmt::format("{} has unknown key \"{}\" (name, schema, strict, description)", p, k));
  }
  if (auto n = js->find("name");
      n == js->end() || !n->is_string() || n->get_ref<const std::string&>().empty())
    return invalid(p + ".name", p + ".name is required and must be a non-empty string");
  if (auto d = js->find("description"); d != js->end() && !d->is_null() && !d->is_string())
    return invalid(p + ".description", p + ".description must be a string");
  std::optional<bool> strict;
  if (auto e = optional_bool(*js, "strict", p + ".strict", strict)) return e;
  if (!given(*js, "schema"))
    return invalid(p + ".schema", p + ".schema is required: the JSON Schema the output must match");
  GrammarSpec g{InputKind::kJsonSchema, "", false, p + ".schema"};
  if (auto e = schema_text((*js)["schema"], p + ".schema", g.text)) return e;
  out = std::move(g);  // strict or not, the schema is enforced (docs/serving.md)
  return std::nullopt;
}

// structured_outputs: exactly one of json, regex, choice, grammar, json_object, plus whitespace options.
std::optional<ApiError> from_structured_outputs(const ojson& so, std::optional<GrammarSpec>& out) {
  const std::string p = "structured_outputs";
  if (!so.is_object()) return invalid(p, p + " must be an object");
  static constexpr std::array<std::string_view, 10> kKnown = {"json",
                                                              "regex",
                                                              "choice",
                                                              "grammar",
                                                              "json_object",
                                                              "structural_tag",
                                                              "whitespace_pattern",
                                                              "disable_any_whitespace",
                                                              "disable_additional_properties",
                                                              "disable_fallback"};
  for (auto kv = so.begin(); kv != so.end(); ++kv) {
    bool known = false;
    for (auto k : kKnown) known = known || kv.key() == k;
    if (!known)
      return invalid(p, fmt::format("{} has unknown key \"{}\" (json, regex, choice, grammar, json_object)",
                                    p, kv.key()));
  }
  for (const char* k : {"structural_tag", "whitespace_pattern"})
    if (given(so, k))
      return invalid(p + "." + k, fmt::format("{}.{} is not supported", p, k), "unsupported_parameter");
  std::optional<bool> json_object, no_ws, no_extra, no_fallback;
  if (auto e = optional_bool(so, "json_object", p + ".json_object", json_object)) return e;
  if (auto e = optional_bool(so, "disable_any_whitespace", p + ".disable_any_whitespace", no_ws)) return e;
  if (auto e =
          optional_bool(so, "disable_additional_properties", p + ".disable_additional_properties", no_extra))
    return e;
  if (auto e = optional_bool(so, "disable_fallback", p + ".disable_fallback", no_fallback)) return e;
  std::vector<std::string> kinds;
  for (const char* k : {"json", "regex", "choice", "grammar"})
    if (given(so, k)) kinds.push_back(k);
  if (json_object.value_or(false)) kinds.push_back("json_object");
  if (kinds.size() != 1)
    return invalid(p, kinds.empty()
                          ? p + " needs one of json, regex, choice, grammar, json_object"
                          : fmt::format("{} takes only one of json, regex, choice, grammar, json_object; "
                                        "got {} and {}",
                                        p, kinds[0], kinds[1]));
  GrammarSpec g;
  g.param = p + "." + kinds[0];
  // Compact JSON is gridq's default; disable_any_whitespace: false asks for vLLM's flexible whitespace.
  g.flexible_whitespace = no_ws.has_value() && !*no_ws;
  const std::string& k = kinds[0];
  if (k == "json") {
    g.kind = InputKind::kJsonSchema;
    if (auto e = schema_text(so["json"], g.param, g.text)) return e;
  } else if (k == "regex") {
    g.kind = InputKind::kRegex;
    if (auto e = nonempty_string(so["regex"], g.param, g.text)) return e;
  } else if (k == "choice") {
    g.kind = InputKind::kChoice;
    if (auto e = choice_list(so["choice"], g.param, g.text)) return e;
  } else if (k == "grammar") {
    g.kind = InputKind::kGbnf;
    if (auto e = nonempty_string(so["grammar"], g.param, g.text)) return e;
  } else {
    g.kind = InputKind::kJsonObject;
  }
  out = std::move(g);
  return std::nullopt;
}

// The older top-level fields: guided_json, guided_regex, guided_choice, guided_grammar (one of them).
std::optional<ApiError> from_guided(const ojson& b, std::optional<GrammarSpec>& out) {
  if (given(b, "guided_whitespace_pattern"))
    return invalid("guided_whitespace_pattern", "guided_whitespace_pattern is not supported",
                   "unsupported_parameter");
  if (given(b, "guided_decoding_backend") && !b["guided_decoding_backend"].is_string())
    return invalid("guided_decoding_backend", "guided_decoding_backend must be a string");
  std::vector<std::string> kinds;
  for (const char* k : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"})
    if (given(b, k)) kinds.push_back(k);
  if (kinds.empty()) return std::nullopt;
  if (kinds.size() > 1)
    return invalid(kinds[1], fmt::format("{} and {} are mutually exclusive", kinds[0], kinds[1]));
  const std::string& k = kinds[0];
  GrammarSpec g;
  g.param = k;
  if (k == "guided_json") {
    g.kind = InputKind::kJsonSchema;
    if (auto e = schema_text(b[k], k, g.text)) return e;
  } else if (k == "guided_regex") {
    g.kind = InputKind::kRegex;
    if (auto e = nonempty_string(b[k], k, g.text)) return e;
  } else if (k == "guided_choice") {
    g.kind = InputKind::kChoice;
    if (auto e = choice_list(b[k], k, g.text)) return e;
  } else {
    g.kind = InputKind::kGbnf;
    if (auto e = nonempty_string(b[k], k, g.text)) return e;
  }
  out = std::move(g);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_structured(const ojson& b, std::optional<GrammarSpec>& out) {
  out.reset();
  std::optional<GrammarSpec> rf, so, guided;
  if (given(b, "response_format"))
    if (auto e = from_response_format(b["response_format"], rf)) return e;
  if (given(b, "structured_outputs"))
    if (auto e = from_structured_outputs(b["structured_outputs"], so)) return e;
  if (auto e = from_guided(b, guided)) return e;
  std::vector<std::string> sources;
  for (const auto* g : {&rf, &so, &guided})
    if (g->has_value()) sources.push_back((*g)->param);
  if (sources.size() > 1)
    return invalid(sources[1],
                   fmt::format("{} and {} both constrain the output; give only one", sources[0], sources[1]));
  for (auto* g : {&rf, &so, &guided})
    if (g->has_value()) out = std::move(*g);
  return std::nullopt;
}

}  // namespace gridq::serve

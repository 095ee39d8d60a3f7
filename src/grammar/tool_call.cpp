#include "grammar/tool_call.h"

#include "grammar/codepoints.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/regex.h"
#include "text/tool_parser_common.h"

namespace gridq::grammar {
namespace {

bool non_negative_int(const ojson& v, uint32_t& out) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 100000) return false;
  out = static_cast<uint32_t>(v.get<int64_t>());
  return true;
}

// A raw string argument: the characters a tool parser keeps as they are (see tool_call.h).
Expected<Seq> raw_string(Builder& b, SchemaCompiler& sc, const ojson& s, const std::string& where,
                         size_t max_depth) {
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type" || k == "enum" || k == "const" || k == "minLength" || k == "maxLength" ||
        k == "pattern" || k == "format" || is_annotation_keyword(k))
      continue;
    return err("{}: keyword '{}' is not supported for a string argument of a forced tool call", where, k);
  }
  auto literal = [&](const ojson& v) -> Expected<Seq> {
    const std::string& t = v.get_ref<const std::string&>();
    if (t.find('<') != std::string::npos)
      return err("{}: the value \"{}\" holds '<', which a forced tool call's string argument cannot", where,
                 t);
    return b.lit(t);
  };
  if (s.contains("const")) {
    if (!s["const"].is_string()) return err("{}: const of a string argument must be a string", where);
    return literal(s["const"]);
  }
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) return err("{}: enum must be an array", where);
    std::vector<Seq> alts;
    for (const ojson& v : s["enum"]) {
      if (!v.is_string()) continue;  // "type": "string" rules the other values out
      GRIDQ_ASSIGN_OR_RETURN(Seq one, literal(v));
      alts.push_back(std::move(one));
    }
    if (alts.empty()) return err("{}: no enum value is a string (unsatisfiable)", where);
    return Seq{b.alt(std::move(alts))};
  }
  const bool has_len = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format") || s.contains("pattern")) {
    if (has_len || (s.contains("format") && s.contains("pattern")))
      return err("{}: format/pattern together with each other or a length is not supported", where);
    if (s.contains("format")) {
      if (!s["format"].is_string()) return err("{}: format must be a string", where);
      return sc.format_body(s["format"].get<std::string>());  // the formats' text needs no JSON escape
    }
    if (!s["pattern"].is_string()) return err("{}: pattern must be a string", where);
    RegexOptions ro;
    ro.search = true;
    GRIDQ_ASSIGN_OR_RETURN(Sym re, compile_regex(b, s["pattern"].get<std::string>(), ro, max_depth));
    return Seq{re};
  }
  uint32_t mn = 0, mx = kUnbounded;
  if (s.contains("minLength") && !non_negative_int(s["minLength"], mn))
    return err("{}: minLength must be an integer in [0, 100000]", where);
  if (s.contains("maxLength") && !non_negative_int(s["maxLength"], mx))
    return err("{}: maxLength must be an integer in [0, 100000]", where);
  if (mn > mx) return err("{}: minLength {} > maxLength {} (unsatisfiable)", where, mn, mx);
  CodepointSet chars = CodepointSet::all();
  chars = chars.minus(CodepointSet::range('<', '<')).minus(CodepointSet::range(0, 0x1F));
  chars.add('\t', '\n');
  chars.add('\r', '\r');
  return Seq{b.rep({lower_utf8(b, chars)}, mn, mx)};
}

// One tool's call: <tool_call>NAME, its arguments, </tool_call>.
Expected<Seq> one_call(Builder& b, const ojson& fn, const text::ToolSchemas& kinds,
                       const CompileOptions& opt) {
  const std::string name = fn["name"].get<std::string>();
  const std::string where = "tool '" + name + "'";
  static const ojson kEmpty = ojson::object();
  const ojson& params = fn.contains("parameters") && fn["parameters"].is_object() ? fn["parameters"] : kEmpty;
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type" || k == "properties" || k == "required" || k == "additionalProperties" || k == "$defs" ||
        k == "definitions" || k == "strict" || is_annotation_keyword(k))
      continue;
    return err("{}: parameters keyword '{}' is not supported for a forced tool call", where, k);
  }
  if (params.contains("type") && params["type"] != "object")
    return err("{}: parameters must be a schema of type object", where);
  std::set<std::string> required;
  if (params.contains("required")) {
    if (!params["required"].is_array()) return err("{}: required must be an array of names", where);
    for (const ojson& r : params["required"]) {
      if (!r.is_string()) return err("{}: required must be an array of names", where);
      required.insert(r.get<std::string>());
    }
  }
  SchemaCompiler sc(b, params, opt);
  Seq out = b.lit(std::string(kToolCallOpen) + name);
  if (params.contains("properties")) {
    if (!params["properties"].is_object()) return err("{}: properties must be an object", where);
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
      const std::string& key = it.key();
      if (key.find('<') != std::string::npos) return err("{}: argument name '{}' holds '<'", where, key);
      const std::string at = where + " argument '" + key + "'";
      Seq value;
      if (kinds.is_string(name, key) && it.value().is_object()) {
        GRIDQ_ASSIGN_OR_RETURN(value, raw_string(b, sc, it.value(), at, opt.limits.max_depth));
      } else {
        auto v = sc.value(it.value(), 1);
        if (!v.ok()) return err("{}: {}", at, v.message());
        value = std::move(*v);
      }
      Seq pair = b.lit("<arg_key>" + key + "</arg_key><arg_value>") + value + b.lit("</arg_value>");
      out = out + (required.count(key) ? Seq{b.seq_rule(std::move(pair))} : Seq{b.opt(std::move(pair))});
      required.erase(key);
      GRIDQ_RETURN_IF_ERROR(b.check_limits());
    }
  }
  if (!required.empty())
    return err("{}: required argument '{}' is not among its properties (unsatisfiable)", where,
               *required.begin());
  return out + b.lit(std::string(kToolCallClose));
}

// One tool's call in the JSON syntax; the arguments object is the parameters schema compiled as is.
Expected<Seq> one_json_call(Builder& b, const ojson& fn, const CompileOptions& opt) {
  const std::string name = fn["name"].get<std::string>();
  Seq head =
      b.lit(std::string(kToolCallOpen) + "\n{\"name\":\"" + json_escape_body(name) + "\",\"arguments\":");
  Seq tail = b.lit("}\n" + std::string(kToolCallClose));
  if (!fn.contains("parameters") || fn["parameters"].is_null()) {
    static const ojson kEmpty = ojson::object();
    SchemaCompiler sc(b, kEmpty, opt);
    return head + Seq{sc.any_object()} + tail;
  }
  const ojson& params = fn["parameters"];
  if (params.contains("type") && params["type"] != "object")
    return err("tool '{}': parameters must be a schema of type object", name);
  SchemaCompiler sc(b, params, opt);
  auto args = sc.value(params, 0);
  if (!args.ok()) return err("tool '{}': {}", name, args.message());
  return head + *args + tail;
}

Expected<std::shared_ptr<const Grammar>> tool_calls(const ojson& tools, const std::string& only_name,
                                                    bool parallel, const CompileOptions& opt, bool json) {
  if (!tools.is_array() || tools.empty()) return err("tool calls need a non-empty tools list");
  const text::ToolSchemas kinds = text::tool_schemas_from_openai(nlohmann::json::parse(tools.dump()));
  Builder b(opt.limits);
  std::vector<Seq> calls;
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    if (!only_name.empty() && fn["name"] != only_name) continue;
    GRIDQ_ASSIGN_OR_RETURN(Seq c, json ? one_json_call(b, fn, opt) : one_call(b, fn, kinds, opt));
    calls.push_back(std::move(c));
    GRIDQ_RETURN_IF_ERROR(b.check_limits());
  }
  if (calls.empty()) return err("no tool named '{}'", only_name);
  Sym call = b.alt(std::move(calls), "tool_call");
  return b.finish(parallel ? b.rep({call}, 1, kUnbounded) : call);
}

}  // namespace

Expected<std::shared_ptr<const Grammar>> compile_json_tool_calls(const ojson& tools,
                                                                 const std::string& only_name, bool parallel,
                                                                 const CompileOptions& opt) {
  return tool_calls(tools, only_name, parallel, opt, true);
}

Expected<std::shared_ptr<const Grammar>> compile_poolside_tool_calls(const ojson& tools,
                                                                     const std::string& only_name,
                                                                     bool parallel,
                                                                     const CompileOptions& opt) {
  return tool_calls(tools, only_name, parallel, opt, false);
}

}  // namespace gridq::grammar

#include "grammar/json_schema.h"

#include "grammar/codepoints.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/matcher.h"

namespace gridq::grammar {

bool is_annotation_keyword(const std::string& k) {
  static const std::set<std::string> kAnnotations = {
      "$schema",          "$id",        "id",       "$comment",  "title", "description", "default",
      "examples",         "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentEncoding",
      "contentMediaType", "example"};
  return kAnnotations.count(k) > 0;
}

bool is_supported_keyword(const std::string& k) {
  static const std::set<std::string> kSupported = {"type",
                                                   "enum",
                                                   "const",
                                                   "properties",
                                                   "required",
                                                   "additionalProperties",
                                                   "items",
                                                   "prefixItems",
                                                   "additionalItems",
                                                   "minItems",
                                                   "maxItems",
                                                   "minLength",
                                                   "maxLength",
                                                   "pattern",
                                                   "format",
                                                   "minimum",
                                                   "maximum",
                                                   "exclusiveMinimum",
                                                   "exclusiveMaximum",
                                                   "anyOf",
                                                   "oneOf",
                                                   "allOf",
                                                   "$ref",
                                                   "multipleOf",
                                                   "uniqueItems"};
  return kSupported.count(k) > 0 || is_annotation_keyword(k);
}

std::set<std::string> schema_types(const ojson& s) {
  std::set<std::string> t;
  if (!s.is_object()) return t;
  if (s.contains("type")) {
    const ojson& ty = s["type"];
    if (ty.is_string()) t.insert(ty.get<std::string>());
    if (ty.is_array())
      for (const ojson& x : ty)
        if (x.is_string()) t.insert(x.get<std::string>());
    return t;
  }
  auto values = [&](const ojson& v) {
    if (v.is_string()) t.insert("string");
    if (v.is_number_integer() || v.is_number_unsigned()) t.insert("integer");
    if (v.is_number_float()) t.insert("number");
    if (v.is_boolean()) t.insert("boolean");
    if (v.is_null()) t.insert("null");
    if (v.is_object()) t.insert("object");
    if (v.is_array()) t.insert("array");
  };
  if (s.contains("const")) {
    values(s["const"]);
    return t;
  }
  if (s.contains("enum") && s["enum"].is_array()) {
    for (const ojson& v : s["enum"]) values(v);
    return t;
  }
  for (const char* k : {"properties", "required", "additionalProperties"})
    if (s.contains(k)) t.insert("object");
  for (const char* k : {"items", "prefixItems", "minItems", "maxItems", "additionalItems"})
    if (s.contains(k)) t.insert("array");
  for (const char* k : {"minLength", "maxLength", "pattern", "format"})
    if (s.contains(k)) t.insert("string");
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
    if (s.contains(k)) t.insert("number");
  return t;
}

Seq SchemaCompiler::ws() {
  if (!opt_.flexible_whitespace) return {};
  if (!ws_) {
    ByteSet w;
    for (char c : std::string(" \t\n\r")) w.set(static_cast<unsigned char>(c));
    ws_ = b_.star({b_.cls(w)});
  }
  return {*ws_};
}

Sym SchemaCompiler::json_string_sym() {
  if (!any_string_) any_string_ = b_.seq_rule(b_.lit("\"") + json_free_chars(b_) + b_.lit("\""));
  return *any_string_;
}

Sym SchemaCompiler::any_number() {
  if (!any_number_) {
    Sym digit = b_.cls(byte_range('0', '9'));
    Seq intpart = Seq{b_.opt(b_.lit("-"))} +
                  Seq{b_.alt({b_.lit("0"), Seq{b_.cls(byte_range('1', '9')), b_.star({digit})}})};
    ByteSet e, pm;
    e.set('e'), e.set('E'), pm.set('+'), pm.set('-');
    Sym frac = b_.opt(b_.lit(".") + Seq{b_.rep({digit}, 1, kUnbounded)});
    Sym exp = b_.opt(Seq{b_.cls(e), b_.opt({b_.cls(pm)}), b_.rep({digit}, 1, kUnbounded)});
    any_number_ = b_.seq_rule(intpart + frac + exp);
  }
  return *any_number_;
}

Sym SchemaCompiler::any_value() {
  if (any_value_) return *any_value_;
  uint32_t v = b_.declare("json_value");
  any_value_ = Sym::rule(v);
  Sym sep = b_.seq_rule(ws() + b_.lit(",") + ws());
  Sym arr =
      b_.seq_rule(b_.lit("[") + ws() + Seq{b_.opt(Seq{*any_value_} + Seq{b_.star(Seq{sep, *any_value_})})} +
                  ws() + b_.lit("]"));
  std::vector<Seq> alts = {Seq{any_object()}, Seq{arr},        Seq{json_string_sym()}, Seq{any_number()},
                           b_.lit("true"),    b_.lit("false"), b_.lit("null")};
  b_.define(v, std::move(alts));
  return *any_value_;
}

Sym SchemaCompiler::any_object() {
  if (any_object_) return *any_object_;
  Sym value = any_value_ ? *any_value_ : Sym::rule(b_.declare("json_value_fwd"));
  bool fwd = !any_value_;
  Sym sep = b_.seq_rule(ws() + b_.lit(",") + ws());
  Sym kv = b_.seq_rule(Seq{json_string_sym()} + ws() + b_.lit(":") + ws() + Seq{value});
  any_object_ =
      b_.seq_rule(b_.lit("{") + ws() + Seq{b_.opt(Seq{kv, b_.star(Seq{sep, kv})})} + ws() + b_.lit("}"));
  if (fwd) b_.define(value.index(), {Seq{any_value()}});
  return *any_object_;
}

Expected<Seq> SchemaCompiler::value(const ojson& s, size_t depth) {
  if (depth > opt_.limits.max_depth)
    return err("schema nesting deeper than {} (limit)", opt_.limits.max_depth);
  GRIDQ_RETURN_IF_ERROR(b_.check_limits());
  if (s.is_boolean()) {
    if (s.get<bool>()) return Seq{any_value()};
    return err("schema 'false' admits no value (unsatisfiable)");
  }
  if (!s.is_object()) return err("a schema must be an object or a boolean, got {}", s.dump().substr(0, 80));
  for (const auto& [k, v] : s.items())
    if (!is_supported_keyword(k)) return err("unsupported JSON Schema keyword '{}'", k);
  return value_inner(s, depth);
}

Expected<Seq> SchemaCompiler::value_inner(const ojson& s, size_t depth) {
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array() || s["allOf"].empty()) return err("allOf must be a non-empty array");
    ojson base = s;
    base.erase("allOf");
    for (const ojson& branch : s["allOf"]) {
      GRIDQ_ASSIGN_OR_RETURN(ojson inl, inline_ref(branch, depth + 1));
      GRIDQ_ASSIGN_OR_RETURN(base, merge(base, inl, depth + 1));
    }
    return value(base, depth + 1);
  }
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) return err("$ref must be a string");
    bool only_ref = true;
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && !is_annotation_keyword(k)) only_ref = false;
    if (!only_ref) {
      GRIDQ_ASSIGN_OR_RETURN(ojson inl, inline_ref(s, depth + 1));
      return value(inl, depth + 1);
    }
    const std::string ref = s["$ref"].get<std::string>();
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return Seq{Sym::rule(it->second)};
    GRIDQ_ASSIGN_OR_RETURN(const ojson* target, resolve_ref(ref));
    uint32_t r = b_.declare("ref " + ref);
    ref_rules_[ref] = r;
    auto body = value(*target, depth + 1);
    if (!body.ok()) {
      b_.define(r, {});  // matches nothing, so a caller that drops this branch leaves a well-formed grammar
      return body.error();
    }
    b_.define(r, {std::move(*body)});
    return Seq{Sym::rule(r)};
  }
  if (s.contains("anyOf") && s.contains("oneOf")) return err("anyOf together with oneOf is not supported");
  if (s.contains("anyOf")) return one_or_any_of(s, "anyOf", depth);
  if (s.contains("oneOf")) return one_or_any_of(s, "oneOf", depth);
  if (s.contains("enum") || s.contains("const")) {
    std::vector<ojson> values;
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return err("enum must be an array");
      for (const ojson& v : s["enum"]) values.push_back(v);
    }
    if (s.contains("const")) {
      if (s.contains("enum")) {
        bool in = false;
        for (const ojson& v : values) in = in || v == s["const"];
        if (!in) return err("const is not one of the enum values (unsatisfiable)");
      }
      values = {s["const"]};
    }
    return enum_values(s, std::move(values), depth);
  }
  if (s.contains("uniqueItems") && s["uniqueItems"] != false)
    return err("unsupported JSON Schema keyword 'uniqueItems' (true)");
  std::set<std::string> types = schema_types(s);
  if (types.empty()) return Seq{any_value()};
  if (types.count("integer") && types.count("number")) types.erase("integer");
  std::vector<Seq> alts;
  for (const std::string& t : types) {
    GRIDQ_ASSIGN_OR_RETURN(Seq a, typed(s, t, depth));
    alts.push_back(std::move(a));
  }
  if (alts.size() == 1) return alts[0];
  return Seq{b_.alt(std::move(alts))};
}

Expected<Seq> SchemaCompiler::typed(const ojson& s, const std::string& t, size_t depth) {
  if (s.contains("multipleOf")) {
    const ojson& m = s["multipleOf"];
    bool one = m.is_number() && m.get<double>() == 1.0;
    if (!one || (t != "integer" && t != "number"))
      return err("unsupported JSON Schema keyword 'multipleOf' ({})", m.dump());
    return number_type(s, true);
  }
  if (t == "string") return string_type(s);
  if (t == "integer") return number_type(s, true);
  if (t == "number") return number_type(s, false);
  if (t == "boolean") return Seq{b_.alt({b_.lit("true"), b_.lit("false")})};
  if (t == "null") return b_.lit("null");
  if (t == "object") return object_type(s, depth);
  if (t == "array") return array_type(s, depth);
  return err("unknown type '{}'", t);
}

Expected<Seq> SchemaCompiler::enum_values(const ojson& s, std::vector<ojson> values, size_t depth) {
  // The other keywords still apply: each value is kept only if the schema without enum/const matches it
  // (checked with this engine's own grammar, so the filter and the output agree).
  ojson rest = s;
  rest.erase("enum");
  rest.erase("const");
  bool constrained = false;
  for (const auto& [k, v] : rest.items())
    if (!is_annotation_keyword(k)) constrained = true;
  std::vector<Seq> alts;
  std::set<std::string> seen;
  std::shared_ptr<const Grammar> g;
  if (constrained) {
    CompileOptions o = opt_;
    o.flexible_whitespace = false;
    o.allow_additional_properties = true;
    Builder sub(o.limits);
    SchemaCompiler c(sub, root_, o);
    GRIDQ_ASSIGN_OR_RETURN(Seq body, c.value(rest, depth + 1));
    GRIDQ_ASSIGN_OR_RETURN(g, sub.finish(sub.seq_rule(body)));
  }
  for (const ojson& v : values) {
    std::string text = v.dump();
    if (!seen.insert(text).second) continue;
    if (g) {
      Matcher m(g);
      if (m.advance_bytes(text) != text.size() || !m.accepting()) continue;
    }
    alts.push_back(b_.lit(text));
  }
  if (alts.empty()) return err("no enum/const value satisfies the rest of the schema (unsatisfiable)");
  return Seq{b_.alt(std::move(alts))};
}

Expected<Seq> SchemaCompiler::one_or_any_of(const ojson& s, const char* key, size_t depth) {
  const ojson& list = s[key];
  if (!list.is_array() || list.empty()) return err("{} must be a non-empty array", key);
  ojson siblings = s;
  siblings.erase(key);
  bool has_siblings = false;
  for (const auto& [k, v] : siblings.items())
    if (!is_annotation_keyword(k)) has_siblings = true;
  std::vector<ojson> branches;
  for (const ojson& br : list) {
    if (br.is_boolean() && !br.get<bool>()) continue;  // a false branch admits nothing
    if (has_siblings) {
      GRIDQ_ASSIGN_OR_RETURN(ojson inl, inline_ref(br, depth + 1));
      GRIDQ_ASSIGN_OR_RETURN(ojson m, merge(siblings, inl, depth + 1));
      branches.push_back(std::move(m));
    } else {
      branches.push_back(br);
    }
  }
  if (branches.empty()) return err("{}: every branch is false (unsatisfiable)", key);
  if (std::string(key) == "oneOf" && branches.size() > 1) {
    // anyOf output is oneOf-valid only when no value can match two branches: distinct types, or an object
    // discriminator (a required property whose const/enum values differ).
    std::vector<std::set<std::string>> types;
    std::vector<ojson> resolved;
    for (const ojson& br : branches) {
      ojson r = br;
      if (br.is_object() && br.contains("$ref")) {
        GRIDQ_ASSIGN_OR_RETURN(r, inline_ref(br, depth + 1));
      }
      types.push_back(schema_types(r));
      resolved.push_back(r);
    }
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j)
        if (!disjoint(resolved[i], types[i], resolved[j], types[j]))
          return err("oneOf: branches {} and {} may match the same value (only disjoint oneOf is supported)",
                     i, j);
  }
  std::vector<Seq> alts;
  for (const ojson& br : branches) {
    auto a = value(br, depth + 1);
    if (!a.ok()) {
      // An unsatisfiable branch is dropped, like `false`; any other error stands.
      if (a.message().find("unsatisfiable") != std::string::npos && branches.size() > 1) continue;
      return a.error();
    }
    alts.push_back(std::move(*a));
  }
  if (alts.empty()) return err("{}: no branch is satisfiable (unsatisfiable)", key);
  if (alts.size() == 1) return alts[0];
  return Seq{b_.alt(std::move(alts))};
}

Expected<Sym> compile_json_schema(Builder& b, const ojson& schema, const CompileOptions& opt) {
  SchemaCompiler c(b, schema, opt);
  GRIDQ_ASSIGN_OR_RETURN(Seq s, c.value(schema, 0));
  return b.seq_rule(std::move(s));
}

Sym compile_json_any_object(Builder& b, const CompileOptions& opt) {
  ojson root = ojson::object();
  SchemaCompiler c(b, root, opt);
  return c.any_object();
}

}  // namespace gridq::grammar

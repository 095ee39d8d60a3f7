// $ref resolution (local JSON pointers only) and allOf merging: allOf is supported where its branches fold
// into one schema keyword by keyword; a pair of keywords that does not fold is a compile error naming it.
#include <algorithm>
#include <cmath>

#include "grammar/json_schema_compiler.h"

namespace gridq::grammar {

Expected<const ojson*> SchemaCompiler::resolve_ref(const std::string& ref) const {
  if (ref.empty() || ref[0] != '#')
    return err("$ref '{}' is not supported (only local references such as #/$defs/name)", ref);
  if (ref.size() > 1 && ref[1] != '/') return err("$ref '{}': anchors are not supported", ref);
  const ojson* cur = &root_;
  size_t i = 1;
  while (i < ref.size()) {
    size_t j = ref.find('/', i + 1);
    if (j == std::string::npos) j = ref.size();
    std::string raw = ref.substr(i + 1, j - i - 1), tok;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '~' && k + 1 < raw.size() && (raw[k + 1] == '0' || raw[k + 1] == '1')) {
        tok += raw[k + 1] == '0' ? '~' : '/';
        ++k;
      } else if (raw[k] == '%' && k + 2 < raw.size() &&
                 std::isxdigit(static_cast<unsigned char>(raw[k + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(raw[k + 2]))) {
        tok += static_cast<char>(std::stoi(raw.substr(k + 1, 2), nullptr, 16));
        k += 2;
      } else {
        tok += raw[k];
      }
    }
    if (cur->is_object() && cur->contains(tok)) {
      cur = &(*cur)[tok];
    } else if (cur->is_array() && !tok.empty() && std::all_of(tok.begin(), tok.end(), ::isdigit) &&
               std::stoul(tok) < cur->size()) {
      cur = &(*cur)[std::stoul(tok)];
    } else {
      return err("$ref '{}' does not resolve (no '{}')", ref, tok);
    }
    i = j;
  }
  return cur;
}

Expected<ojson> SchemaCompiler::inline_ref(const ojson& s, size_t depth) const {
  if (depth > opt_.limits.max_depth)
    return err("schema nesting deeper than {} (limit)", opt_.limits.max_depth);
  if (!s.is_object() || !s.contains("$ref")) return s;
  if (!s["$ref"].is_string()) return err("$ref must be a string");
  GRIDQ_ASSIGN_OR_RETURN(const ojson* target, resolve_ref(s["$ref"].get<std::string>()));
  ojson rest = s;
  rest.erase("$ref");
  GRIDQ_ASSIGN_OR_RETURN(ojson t, inline_ref(*target, depth + 1));
  return merge(t, rest, depth + 1);
}

namespace {

std::set<std::string> type_set(const ojson& t) {
  std::set<std::string> out;
  if (t.is_string()) out.insert(t.get<std::string>());
  if (t.is_array())
    for (const ojson& x : t)
      if (x.is_string()) out.insert(x.get<std::string>());
  return out;
}

bool types_overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
  if (a.empty() || b.empty()) return true;
  for (const std::string& t : a) {
    if (b.count(t)) return true;
    if (t == "integer" && b.count("number")) return true;
    if (t == "number" && b.count("integer")) return true;
  }
  return false;
}

std::vector<ojson> const_values(const ojson& s) {
  if (!s.is_object()) return {};
  if (s.contains("const")) return {s["const"]};
  if (s.contains("enum") && s["enum"].is_array())
    return std::vector<ojson>(s["enum"].begin(), s["enum"].end());
  return {};
}

}  // namespace

bool disjoint(const ojson& a, const std::set<std::string>& ta, const ojson& b,
              const std::set<std::string>& tb) {
  if (!types_overlap(ta, tb)) return true;
  // Both enumerate their values: disjoint value lists.
  std::vector<ojson> va = const_values(a), vb = const_values(b);
  if (!va.empty() && !vb.empty()) {
    for (const ojson& x : va)
      for (const ojson& y : vb)
        if (x == y) return false;
    return true;
  }
  if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties"))
    return false;
  auto required = [](const ojson& s, const std::string& k) {
    if (!s.contains("required") || !s["required"].is_array()) return false;
    for (const ojson& r : s["required"])
      if (r == k) return true;
    return false;
  };
  for (const auto& [k, pa] : a["properties"].items()) {
    if (!b["properties"].contains(k) || !required(a, k) || !required(b, k)) continue;
    std::vector<ojson> x = const_values(pa), y = const_values(b["properties"][k]);
    if (x.empty() || y.empty()) continue;
    bool shared = false;
    for (const ojson& p : x)
      for (const ojson& q : y) shared = shared || p == q;
    if (!shared) return true;
  }
  return false;
}

Expected<ojson> SchemaCompiler::merge(const ojson& a, const ojson& b, size_t depth) const {
  if (depth > opt_.limits.max_depth)
    return err("schema nesting deeper than {} (limit)", opt_.limits.max_depth);
  if (b.is_boolean()) {
    if (b.get<bool>()) return a;
    return err("allOf contains 'false' (unsatisfiable)");
  }
  if (a.is_boolean()) {
    if (a.get<bool>()) return b;
    return err("allOf contains 'false' (unsatisfiable)");
  }
  if (!a.is_object() || !b.is_object()) return err("allOf: a branch is not a schema");
  for (const auto& [k, v] : b.items())
    if (!is_supported_keyword(k)) return err("unsupported JSON Schema keyword '{}'", k);
  ojson out = a;
  static const std::set<std::string> kMax = {"minimum", "minLength", "minItems"};
  static const std::set<std::string> kMin = {"maximum", "maxLength", "maxItems"};
  for (const auto& [k, v] : b.items()) {
    if (is_annotation_keyword(k)) continue;
    if (!out.contains(k)) {
      out[k] = v;
      continue;
    }
    ojson& o = out[k];
    if (o == v) continue;
    if (k == "type") {
      std::set<std::string> x = type_set(o), y = type_set(v), both;
      for (const std::string& t : x) {
        if (y.count(t))
          both.insert(t);
        else if (t == "number" && y.count("integer"))
          both.insert("integer");
        else if (t == "integer" && y.count("number"))
          both.insert("integer");
      }
      if (both.empty()) return err("allOf: the type sets do not intersect (unsatisfiable)");
      o = ojson::array();
      for (const std::string& t : both) o.push_back(t);
    } else if (k == "properties") {
      if (!o.is_object() || !v.is_object()) return err("properties must be an object");
      for (const auto& [pk, pv] : v.items()) {
        if (!o.contains(pk)) {
          o[pk] = pv;
        } else if (o[pk] != pv) {
          GRIDQ_ASSIGN_OR_RETURN(ojson x, inline_ref(o[pk], depth + 1));
          GRIDQ_ASSIGN_OR_RETURN(ojson y, inline_ref(pv, depth + 1));
          GRIDQ_ASSIGN_OR_RETURN(o[pk], merge(x, y, depth + 1));
        }
      }
    } else if (k == "required") {
      for (const ojson& r : v)
        if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
    } else if (kMax.count(k) && o.is_number() && v.is_number()) {
      if (v.get<double>() > o.get<double>()) o = v;
    } else if (kMin.count(k) && o.is_number() && v.is_number()) {
      if (v.get<double>() < o.get<double>()) o = v;
    } else if (k == "enum" && o.is_array() && v.is_array()) {
      ojson both = ojson::array();
      for (const ojson& x : o)
        if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
      if (both.empty()) return err("allOf: the enum lists do not intersect (unsatisfiable)");
      o = both;
    } else if (k == "allOf") {
      for (const ojson& x : v) o.push_back(x);
    } else if (k == "const") {
      return err("allOf: two different const values (unsatisfiable)");
    } else {
      return err("allOf: cannot merge two different '{}' keywords", k);
    }
  }
  // additionalProperties in one branch forbids the other branch's properties that it does not list.
  for (const ojson* side : {&a, &b}) {
    const ojson& other = side == &a ? b : a;
    if (!side->contains("additionalProperties") || (*side)["additionalProperties"] == true) continue;
    if (!other.contains("properties")) continue;
    for (const auto& [pk, pv] : other["properties"].items())
      if (!side->contains("properties") || !(*side)["properties"].contains(pk))
        return err(
            "allOf: property '{}' of one branch is restricted by additionalProperties of another "
            "(not supported)",
            pk);
  }
  return out;
}

}  // namespace gridq::grammar

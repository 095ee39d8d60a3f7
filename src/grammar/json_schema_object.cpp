// Objects and arrays. An object's properties come in declared order; an optional one may be left out, which
// is why the comma is threaded through a chain of rules T(i, first) ("the rest from property i, and whether
// anything was written yet") instead of a fixed sequence. Arrays use the same shape over their slots.
#include <fmt/format.h>

#include "grammar/codepoints.h"
#include "grammar/json_schema_compiler.h"

namespace gridq::grammar {

Sym SchemaCompiler::key_not_in(const std::vector<std::string>& names) {
  // A key string that decodes to none of `names`: a trie over the names' code points where, at each node,
  // the key may end (unless a name ends there), follow a child, or leave the trie with any other character
  // and continue freely. Canonical escapes only, so a name has exactly one spelling.
  struct Node {
    std::vector<std::pair<uint32_t, size_t>> kids;
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& n : names) {
    size_t cur = 0, i = 0;
    while (i < n.size()) {
      uint32_t cp;
      if (!decode_utf8(n, i, cp)) break;
      size_t next = 0;
      for (const auto& [c, k] : trie[cur].kids)
        if (c == cp) next = k;
      if (next == 0) {
        trie.emplace_back();
        next = trie.size() - 1;
        trie[cur].kids.emplace_back(cp, next);
      }
      cur = next;
    }
    trie[cur].end = true;
  }
  // Once a key has left the trie it differs from every name, so the rest may be any string text (and the
  // token masks' free-string fast path applies there).
  Sym rest = json_free_chars(b_);
  std::vector<uint32_t> rule(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) rule[i] = b_.declare({});
  for (size_t i = 0; i < trie.size(); ++i) {
    std::vector<Seq> alts;
    if (!trie[i].end) alts.push_back({});
    CodepointSet other = CodepointSet::all();
    for (const auto& [c, k] : trie[i].kids) {
      alts.push_back(Seq{lower_json_char(b_, CodepointSet::range(c, c)), Sym::rule(rule[k])});
      other = other.minus(CodepointSet::range(c, c));
    }
    alts.push_back(Seq{lower_json_char(b_, other), rest});
    b_.define(rule[i], std::move(alts));
  }
  return b_.seq_rule(b_.lit("\"") + Seq{Sym::rule(rule[0])} + b_.lit("\""));
}

Expected<Seq> SchemaCompiler::object_type(const ojson& s, size_t depth) {
  struct Prop {
    std::string name;
    const ojson* schema;
    bool required;
  };
  static const ojson kTrue = true;
  std::vector<Prop> props;
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return err("required must be an array");
    for (const ojson& r : s["required"]) {
      if (!r.is_string()) return err("required must list strings");
      required.insert(r.get<std::string>());
    }
  }
  const ojson* extra = nullptr;  // schema of additional properties, or none allowed
  if (s.contains("additionalProperties")) {
    const ojson& ap = s["additionalProperties"];
    if (!(ap.is_boolean() && !ap.get<bool>())) extra = &ap;
  } else if (opt_.allow_additional_properties) {
    extra = &kTrue;
  }
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) return err("properties must be an object");
    for (const auto& [k, v] : s["properties"].items()) props.push_back({k, &v, required.count(k) > 0});
  }
  for (const std::string& r : required) {
    bool listed = false;
    for (const Prop& p : props) listed = listed || p.name == r;
    if (listed) continue;
    if (s.contains("additionalProperties") && !extra)
      return err("required property '{}' is not allowed by additionalProperties false (unsatisfiable)", r);
    props.push_back({r, extra ? extra : &kTrue, true});
  }
  Sym sep = b_.seq_rule(ws() + b_.lit(",") + ws());
  std::vector<Sym> kv;
  for (const Prop& p : props) {
    auto v = value(*p.schema, depth + 1);
    if (!v.ok()) {
      // An optional property whose schema admits nothing is simply never written.
      if (!p.required && v.message().find("unsatisfiable") != std::string::npos) {
        kv.push_back(Sym::rule(b_.declare({})));
        b_.define(kv.back().index(), {});
        continue;
      }
      return err("property '{}': {}", p.name, v.message());
    }
    // fmt, not "\"" + std::string&&: that insert-into-itself trips GCC 12's false -Wrestrict at -O3.
    kv.push_back(b_.seq_rule(b_.lit(fmt::format("\"{}\"", json_escape_body(p.name))) + ws() + b_.lit(":") +
                             ws() + *v));
  }
  // T(n, first): the additional properties.
  Sym t_first, t_rest;
  if (extra) {
    std::vector<std::string> names;
    for (const Prop& p : props) names.push_back(p.name);
    GRIDQ_ASSIGN_OR_RETURN(Seq ev, value(*extra, depth + 1));
    Sym ekv = b_.seq_rule(Seq{key_not_in(names)} + ws() + b_.lit(":") + ws() + ev);
    Sym more = b_.star({sep, ekv});
    t_first = b_.opt({ekv, more});
    t_rest = more;
  } else {
    t_first = t_rest = b_.alt({Seq{}});
  }
  for (size_t i = props.size(); i-- > 0;) {
    std::vector<Seq> f = {Seq{kv[i], t_rest}}, r = {Seq{sep, kv[i], t_rest}};
    if (!props[i].required) {
      f.push_back({t_first});
      r.push_back({t_rest});
    }
    t_first = b_.alt(std::move(f));
    t_rest = b_.alt(std::move(r));
    GRIDQ_RETURN_IF_ERROR(b_.check_limits());
  }
  return b_.lit("{") + ws() + Seq{t_first} + ws() + b_.lit("}");
}

Expected<Seq> SchemaCompiler::array_type(const ojson& s, size_t depth) {
  static const ojson kTrue = true;
  std::vector<const ojson*> prefix;
  const ojson* rest = &kTrue;  // schema of items after the prefix; nullptr: none allowed
  auto tail = [&](const char* k) -> Status {
    if (!s.contains(k)) return {};
    const ojson& v = s[k];
    if (v.is_boolean() && !v.get<bool>())
      rest = nullptr;
    else if (v.is_object() || v.is_boolean())
      rest = &v;
    else
      return err("{} must be a schema", k);
    return {};
  };
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) return err("prefixItems must be an array");
    for (const ojson& x : s["prefixItems"]) prefix.push_back(&x);
    GRIDQ_RETURN_IF_ERROR(tail("items"));
    if (s.contains("additionalItems"))
      return err("additionalItems together with prefixItems is not supported");
  } else if (s.contains("items") && s["items"].is_array()) {  // draft-04/07 tuple form
    for (const ojson& x : s["items"]) prefix.push_back(&x);
    GRIDQ_RETURN_IF_ERROR(tail("additionalItems"));
  } else {
    GRIDQ_RETURN_IF_ERROR(tail("items"));
    if (s.contains("additionalItems")) return err("additionalItems without a tuple 'items' is not supported");
  }
  int64_t mn = 0, mx = -1;
  auto count = [&](const char* k, int64_t& out) -> Status {
    if (!s.contains(k)) return {};
    const ojson& v = s[k];
    if (!v.is_number_integer() && !v.is_number_unsigned()) return err("{} must be an integer", k);
    out = v.get<int64_t>();
    if (out < 0 || out > 100000) return err("{} {} is out of the supported range [0, 100000]", k, out);
    return {};
  };
  GRIDQ_RETURN_IF_ERROR(count("minItems", mn));
  GRIDQ_RETURN_IF_ERROR(count("maxItems", mx));
  if (!rest) mx = mx < 0 ? static_cast<int64_t>(prefix.size()) : std::min<int64_t>(mx, prefix.size());
  if (mx >= 0 && mn > mx) return err("minItems {} > the most items allowed, {} (unsatisfiable)", mn, mx);
  if (mx >= 0 && static_cast<int64_t>(prefix.size()) > mx) prefix.resize(mx);
  Sym sep = b_.seq_rule(ws() + b_.lit(",") + ws());
  const int64_t k = static_cast<int64_t>(prefix.size());
  // L(k, first/rest): the items after the prefix, count in [a, b].
  Sym l_first, l_rest;
  int64_t a = std::max<int64_t>(0, mn - k), bmax = mx < 0 ? -1 : mx - k;
  if (rest && bmax != 0) {
    GRIDQ_ASSIGN_OR_RETURN(Seq v, value(*rest, depth + 1));
    Sym item = b_.seq_rule(v);
    auto hi = [&](int64_t minus) { return bmax < 0 ? kUnbounded : static_cast<uint32_t>(bmax - minus); };
    Sym more_after_first = b_.rep({sep, item}, static_cast<uint32_t>(a > 0 ? a - 1 : 0), hi(1));
    if (a >= 1)
      l_first = b_.seq_rule({item, more_after_first});
    else
      l_first = b_.opt({item, more_after_first});
    l_rest = b_.rep({sep, item}, static_cast<uint32_t>(a), hi(0));
  } else {
    l_first = l_rest = b_.alt({Seq{}});
  }
  for (int64_t i = k; i-- > 0;) {
    auto v = value(*prefix[i], depth + 1);
    if (!v.ok()) return err("prefix item {}: {}", i, v.message());
    Sym item = b_.seq_rule(*v);
    std::vector<Seq> f = {Seq{item, l_rest}}, r = {Seq{sep, item, l_rest}};
    if (i >= mn) {
      f.push_back({b_.alt({Seq{}})});
      r.push_back({});
    }
    l_first = b_.alt(std::move(f));
    l_rest = b_.alt(std::move(r));
  }
  return b_.lit("[") + ws() + Seq{l_first} + ws() + b_.lit("]");
}

}  // namespace gridq::grammar

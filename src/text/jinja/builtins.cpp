#include "text/jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "text/jinja/builtins_util.h"
#include "text/utf8.h"

namespace gridq::text::jinja {
using namespace detail;  // NOLINT(google-build-using-namespace): the shared helpers of the builtins

std::vector<size_t> cp_offsets(const std::string& s) {
  std::vector<size_t> off;
  size_t i = 0;
  while (i < s.size()) {
    off.push_back(i);
    char32_t c;
    const int n = utf8_next(s, i, &c);
    i += n > 0 ? static_cast<size_t>(n) : 1;
  }
  off.push_back(s.size());
  return off;
}

Expected<List> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return List{};
    case Value::Type::kList:
      return v.list_ref();
    case Value::Type::kDict: {
      List out;
      for (const auto& kv : v.dict_ref().items) out.push_back(Value::string(kv.first));
      return out;
    }
    case Value::Type::kString: {
      List out;
      const auto off = cp_offsets(v.str());
      for (size_t k = 0; k + 1 < off.size(); ++k)
        out.push_back(Value::string(v.str().substr(off[k], off[k + 1] - off[k])));
      return out;
    }
    default:
      return err("'{}' object is not iterable", v.type_name());
  }
}

Expected<Value> get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    return err("'{}' is undefined", obj.str().empty() ? std::string("value") : obj.str());
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(name)) return *v;
  }
  if (has_method(obj, name)) {
    return Value::callable(name, [obj, name](CallArgs& a) { return call_method(obj, name, a); });
  }
  // fmt, not an operator+ chain: GCC 12 at -O3 reports a false -Wrestrict inside libstdc++ for the chain,
  // which broke -DCMAKE_BUILD_TYPE=Release builds with warnings as errors.
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

Expected<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined())
    return err("'{}' is undefined", obj.str().empty() ? std::string("value") : obj.str());
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.dict_ref().find(key.str())) return *v;
    } else if (key.is_int()) {
      if (const Value* v = obj.dict_ref().find(key.to_string())) return *v;
    }
    return Value::undefined("'dict object' has no attribute '" + key.to_string() + "'");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.list_ref().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return obj.list_ref()[static_cast<size_t>(i)];
    }
    const auto off = cp_offsets(obj.str());
    const auto n = static_cast<int64_t>(off.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value::string(obj.str().substr(off[static_cast<size_t>(i)],
                                          off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("no item " + key.repr());
}

Expected<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (!obj.is_list() && !obj.is_string()) return err("'{}' object is not subscriptable", obj.type_name());
  std::vector<size_t> off;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list_ref().size());
  } else {
    off = cp_offsets(obj.str());
    n = static_cast<int64_t>(off.size()) - 1;
  }
  int64_t step = 1;
  if (!step_v.is_none() && !step_v.is_undefined()) {
    GRIDQ_ASSIGN_OR_RETURN(step, to_int_arg(step_v, "slice step"));
  }
  if (step == 0) return err("slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t dflt, bool is_start) -> Expected<int64_t> {
    if (v.is_none() || v.is_undefined()) return dflt;
    GRIDQ_ASSIGN_OR_RETURN(int64_t i, to_int_arg(v, "slice index"));
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    (void)is_start;
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  GRIDQ_ASSIGN_OR_RETURN(int64_t b, norm(start, step > 0 ? 0 : n - 1, true));
  GRIDQ_ASSIGN_OR_RETURN(int64_t e, norm(stop, step > 0 ? n : -1, false));
  List out;
  std::string s;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (obj.is_list()) {
      out.push_back(obj.list_ref()[static_cast<size_t>(i)]);
    } else {
      s += obj.str().substr(off[static_cast<size_t>(i)],
                            off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
    }
  }
  if (obj.is_list()) return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  return Value::string(std::move(s));
}

bool has_method(const Value& obj, const std::string& n) {
  static const std::vector<std::string> str_m = {"strip",   "lstrip",     "rstrip",  "startswith", "endswith",
                                                 "split",   "rsplit",     "replace", "upper",      "lower",
                                                 "title",   "capitalize", "find",    "rfind",      "count",
                                                 "join",    "splitlines", "isdigit", "isalpha",    "isalnum",
                                                 "isspace", "islower",    "isupper", "format",     "index"};
  static const std::vector<std::string> dict_m = {"get", "items", "keys", "values"};
  static const std::vector<std::string> list_m = {"index", "count"};
  const std::vector<std::string>* m = obj.is_string() ? &str_m
                                      : obj.is_dict() ? &dict_m
                                      : obj.is_list() ? &list_m
                                                      : nullptr;
  return m && std::find(m->begin(), m->end(), n) != m->end();
}

Expected<Value> call_method(const Value& obj, const std::string& n, CallArgs& a) {
  if (obj.is_dict()) {
    const Dict& d = obj.dict_ref();
    if (n == "get") {
      const Value& k = arg(a, 0, "key", kUndef);
      if (k.is_string())
        if (const Value* v = d.find(k.str())) return *v;
      return arg(a, 1, "default", kNone);
    }
    List out;
    for (const auto& [k, v] : d.items) {
      if (n == "items")
        out.push_back(Value::tuple({Value::string(k), v}));
      else if (n == "keys")
        out.push_back(Value::string(k));
      else
        out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  if (obj.is_list()) {
    const Value& x = arg(a, 0, "value", kUndef);
    int64_t c = 0;
    const auto& l = obj.list_ref();
    for (size_t k = 0; k < l.size(); ++k) {
      if (values_equal(l[k], x)) {
        if (n == "index") return Value::integer(static_cast<int64_t>(k));
        ++c;
      }
    }
    if (n == "index") return err("{} is not in list", x.repr());
    return Value::integer(c);
  }
  const std::string& s = obj.str();
  if (n == "strip") return Value::string(py_strip(s, arg(a, 0, "chars", kNone), 3));
  if (n == "lstrip") return Value::string(py_strip(s, arg(a, 0, "chars", kNone), 1));
  if (n == "rstrip") return Value::string(py_strip(s, arg(a, 0, "chars", kNone), 2));
  if (n == "startswith" || n == "endswith") {
    bool ok;
    const bool r = starts_or_ends(s, arg(a, 0, "prefix", kUndef), n == "startswith", &ok);
    if (!ok) return err("{} arg must be str or a tuple of str", n);
    return Value::boolean(r);
  }
  if (n == "split" || n == "rsplit") {
    const Value mx = arg(  // a copy: arg() may return its temporary default
        a, 1, "maxsplit", Value::integer(-1));
    GRIDQ_ASSIGN_OR_RETURN(int64_t m, to_int_arg(mx, "maxsplit"));
    if (n == "rsplit" && m >= 0) return err("rsplit with maxsplit is not supported");
    GRIDQ_ASSIGN_OR_RETURN(List parts, py_split(s, arg(a, 0, "sep", kNone), m));
    return Value::list(std::move(parts));
  }
  if (n == "replace") {
    const Value &x = arg(a, 0, "old", kUndef), &y = arg(a, 1, "new", kUndef);
    if (!x.is_string() || !y.is_string()) return err("replace() arguments must be str");
    GRIDQ_ASSIGN_OR_RETURN(int64_t c, to_int_arg(arg(a, 2, "count", Value::integer(-1)), "count"));
    return Value::string(py_replace(s, x.str(), y.str(), c));
  }
  if (n == "upper") return Value::string(ascii_upper(s));
  if (n == "lower") return Value::string(ascii_lower(s));
  if (n == "title") return Value::string(py_title(s));
  if (n == "capitalize") return Value::string(py_capitalize(s));
  if (n == "find" || n == "rfind" || n == "index") {
    const Value& x = arg(a, 0, "sub", kUndef);
    if (!x.is_string()) return err("{}() argument must be str", n);
    const size_t f = n == "rfind" ? s.rfind(x.str()) : s.find(x.str());
    if (f == std::string::npos) {
      if (n == "index") return err("substring not found");
      return Value::integer(-1);
    }
    const auto off = cp_offsets(s);
    return Value::integer(static_cast<int64_t>(std::lower_bound(off.begin(), off.end(), f) - off.begin()));
  }
  if (n == "count") {
    const Value& x = arg(a, 0, "sub", kUndef);
    if (!x.is_string() || x.str().empty()) return err("count() needs a non-empty str");
    int64_t c = 0;
    for (size_t p = s.find(x.str()); p != std::string::npos; p = s.find(x.str(), p + x.str().size())) ++c;
    return Value::integer(c);
  }
  if (n == "join") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(arg(a, 0, "iterable", kUndef)));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (!items[k].is_string())
        return err("sequence item {}: expected str instance, {} found", k, items[k].type_name());
      if (k) out += s;
      out += items[k].str();
    }
    return Value::string(out);
  }
  if (n == "splitlines") {
    List out;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t e = s.find_first_of("\r\n", pos);
      if (e == std::string::npos) {
        out.push_back(Value::string(s.substr(pos)));
        break;
      }
      out.push_back(Value::string(s.substr(pos, e - pos)));
      pos = e + ((s[e] == '\r' && e + 1 < s.size() && s[e + 1] == '\n') ? 2 : 1);
    }
    return Value::list(std::move(out));
  }
  if (n == "isdigit" || n == "isalpha" || n == "isalnum" || n == "isspace" || n == "islower" ||
      n == "isupper") {
    if (s.empty()) return Value::boolean(false);
    bool any_cased = false;
    for (char32_t c : cps(s)) {
      const bool dig = c >= '0' && c <= '9', alp = c < 0x80 && is_alpha(static_cast<char>(c));
      if (n == "isdigit" && !dig) return Value::boolean(false);
      if (n == "isalpha" && !alp) return Value::boolean(false);
      if (n == "isalnum" && !dig && !alp) return Value::boolean(false);
      if (n == "isspace" && !py_isspace(c)) return Value::boolean(false);
      if (n == "islower" && c >= 'A' && c <= 'Z') return Value::boolean(false);
      if (n == "isupper" && c >= 'a' && c <= 'z') return Value::boolean(false);
      if (alp) any_cased = true;
    }
    if (n == "islower" || n == "isupper") return Value::boolean(any_cased);
    return Value::boolean(true);
  }
  return err("str.{}() is not supported", n);
}

Expected<bool> apply_test(const std::string& n, const Value& v, CallArgs& a) {
  const Value& x = arg(a, 0, "other", kUndef);
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (n == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "callable") return v.is_callable();
  if (n == "escaped") return false;
  if (n == "lower" || n == "upper") {
    CallArgs none;
    GRIDQ_ASSIGN_OR_RETURN(
        Value r, call_method(Value::string(v.to_string()), n == "lower" ? "islower" : "isupper", none));
    return r.as_bool();
  }
  if (n == "eq" || n == "equalto" || n == "==") return values_equal(v, x);
  if (n == "ne" || n == "!=") return !values_equal(v, x);
  if (n == "lt" || n == "lessthan" || n == "<") return values_less(v, x);
  if (n == "gt" || n == "greaterthan" || n == ">") return values_less(x, v);
  if (n == "le" || n == "<=") {
    GRIDQ_ASSIGN_OR_RETURN(bool g, values_less(x, v));
    return !g;
  }
  if (n == "ge" || n == ">=") {
    GRIDQ_ASSIGN_OR_RETURN(bool l, values_less(v, x));
    return !l;
  }
  if (n == "sameas") return v.same_object(x);
  if (n == "odd" || n == "even") {
    if (!v.is_int()) return err("test '{}' needs an integer", n);
    const bool odd = (v.as_int() % 2) != 0;
    return n == "odd" ? odd : !odd;
  }
  if (n == "divisibleby") {
    if (!v.is_int() || !x.is_int() || x.as_int() == 0)
      return err("test 'divisibleby' needs non-zero integers");
    return v.as_int() % x.as_int() == 0;
  }
  if (n == "in") {
    const Value& seq = arg(a, 0, "seq", kUndef);
    if (seq.is_string()) {
      if (!v.is_string()) return err("'in <string>' requires string as left operand, not {}", v.type_name());
      return seq.str().find(v.str()) != std::string::npos;
    }
    if (seq.is_dict()) return v.is_string() && seq.dict_ref().find(v.str()) != nullptr;
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(seq));
    for (const auto& it : items)
      if (values_equal(it, v)) return true;
    return false;
  }
  return err("no test named '{}'", n);
}

std::vector<std::pair<std::string, Value>> make_globals() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::callable("range", [](CallArgs& a) -> Expected<Value> {
                   int64_t start = 0, stop, step = 1;
                   if (a.pos.empty() || a.pos.size() > 3) return err("range expected 1 to 3 arguments");
                   for (auto& p : a.pos)
                     if (!p.is_int()) return err("range arguments must be integers");
                   if (a.pos.size() == 1) {
                     stop = a.pos[0].as_int();
                   } else {
                     start = a.pos[0].as_int();
                     stop = a.pos[1].as_int();
                     if (a.pos.size() == 3) step = a.pos[2].as_int();
                   }
                   if (step == 0) return err("range() arg 3 must not be zero");
                   List out;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
                     if (out.size() >= 1000000) return err("range is too large (limit 1000000 items)");
                     out.push_back(Value::integer(i));
                     if (__builtin_add_overflow(i, step, &i)) break;
                   }
                   return Value::list(std::move(out));
                 }));
  auto make_dict = [](bool ns) {
    return [ns](CallArgs& a) -> Expected<Value> {
      Dict d;
      d.is_namespace = ns;
      for (auto& p : a.pos) {
        if (!p.is_dict()) return err("{}() positional argument must be a mapping", ns ? "namespace" : "dict");
        for (auto& [k, v] : p.dict_ref().items) d.set(k, v);
      }
      for (auto& [k, v] : a.kw) d.set(k, v);
      return Value::dict(std::move(d));
    };
  };
  g.emplace_back("namespace", Value::callable("namespace", make_dict(true)));
  g.emplace_back("dict", Value::callable("dict", make_dict(false)));
  g.emplace_back("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Expected<Value> {
                   return err("raise_exception: {}", a.pos.empty() ? std::string() : a.pos[0].to_string());
                 }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", [](CallArgs& a) -> Expected<Value> {
                   const std::string f = a.pos.empty() ? std::string("%Y-%m-%d") : a.pos[0].to_string();
                   std::time_t t = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&t, &tm);
                   char buf[256];
                   const size_t n = std::strftime(buf, sizeof(buf), f.c_str(), &tm);
                   return Value::string(std::string(buf, n));
                 }));
  return g;
}

}  // namespace gridq::text::jinja

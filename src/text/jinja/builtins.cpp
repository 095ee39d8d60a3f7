#include "text/jinja/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "text/utf8.h"

namespace gridq::text::jinja {
namespace {

// Argument access: positional index `i` or keyword `name`, else `dflt`.
const Value& arg(const CallArgs& a, size_t i, const char* name, const Value& dflt) {
  if (i < a.pos.size()) return a.pos[i];
  for (const auto& [k, v] : a.kw)
    if (k == name) return v;
  return dflt;
}

const Value kUndef;

bool fits_int64(double d) { return std::isfinite(d) && d > -9.2e18 && d < 9.2e18; }
const Value kNone = Value::none();

std::string ascii_lower(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
std::string ascii_upper(std::string s) {
  for (auto& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::vector<char32_t> cps(const std::string& s) {
  std::vector<char32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    char32_t c;
    int n = utf8_next(s, i, &c);
    if (n <= 0) {
      n = 1;
      c = 0xFFFD;
    }
    out.push_back(c);
    i += static_cast<size_t>(n);
  }
  return out;
}

// Python str.strip family. which: 1 left, 2 right, 3 both. chars: undefined/none = whitespace.
std::string py_strip(const std::string& s, const Value& chars, int which) {
  std::vector<char32_t> set;
  const bool ws = !chars.is_string();
  if (!ws) set = cps(chars.str());
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  const auto off = cp_offsets(s);
  const auto cv = cps(s);
  size_t b = 0, e = cv.size();
  if (which & 1)
    while (b < e && strip_it(cv[b])) ++b;
  if (which & 2)
    while (e > b && strip_it(cv[e - 1])) --e;
  return s.substr(off[b], off[e] - off[b]);
}

Expected<List> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {
    const auto cv = cps(s);
    const auto off = cp_offsets(s);
    size_t i = 0;
    while (i < cv.size()) {
      while (i < cv.size() && py_isspace(cv[i])) ++i;
      if (i >= cv.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = cv.size();
        while (e > i && py_isspace(cv[e - 1])) --e;
        out.push_back(Value::string(s.substr(off[i], off[e] - off[i])));
        break;
      }
      size_t j = i;
      while (j < cv.size() && !py_isspace(cv[j])) ++j;
      out.push_back(Value::string(s.substr(off[i], off[j] - off[i])));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.str();
  if (d.empty()) return err("empty separator");
  size_t pos = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
    const size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(Value::string(s.substr(pos, f - pos)));
    pos = f + d.size();
  }
  out.push_back(Value::string(s.substr(pos)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string out;
  if (a.empty()) {  // Python inserts `b` around every character
    const auto off = cp_offsets(s);
    int64_t n = 0;
    for (size_t k = 0; k + 1 < off.size() + 1; ++k) {
      if (count < 0 || n < count) {
        out += b;
        ++n;
      }
      if (k + 1 < off.size()) out += s.substr(off[k], off[k + 1] - off[k]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(a, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + b;
    pos = f + a.size();
    ++n;
  }
  return out + s.substr(pos);
}

std::string py_capitalize(const std::string& s) {
  std::string r = ascii_lower(s);
  if (!r.empty() && r[0] >= 'a' && r[0] <= 'z') r[0] = static_cast<char>(r[0] - 'a' + 'A');
  return r;
}

std::string py_title(const std::string& s) {  // str.title(): a letter after a non-letter is upper-cased
  std::string r;
  bool prev_cased = false;
  for (char c : s) {
    if (is_alpha(c)) {
      r += prev_cased ? ascii_lower(std::string(1, c)) : ascii_upper(std::string(1, c));
      prev_cased = true;
    } else {
      r += c;
      prev_cased = false;
    }
  }
  return r;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start, bool* ok) {
  auto one = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  *ok = true;
  if (what.is_string()) return one(what.str());
  if (what.is_list()) {
    for (const auto& v : what.list_ref()) {
      if (!v.is_string()) {
        *ok = false;
        return false;
      }
      if (one(v.str())) return true;
    }
    return false;
  }
  *ok = false;
  return false;
}

Expected<int64_t> to_int_arg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  return err("{} must be an integer, not {}", what, v.type_name());
}

Expected<Value> attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric && cur.is_list()) {
      GRIDQ_ASSIGN_OR_RETURN(cur, get_item(cur, Value::integer(std::stoll(part))));
    } else {
      GRIDQ_ASSIGN_OR_RETURN(cur, get_item(cur, Value::string(part)));
    }
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&#34;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(ascii_lower(v.str()));
  return v;
}

Expected<List> sorted(List items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) {
    Value k = it;
    if (attribute.is_string()) {
      GRIDQ_ASSIGN_OR_RETURN(k, attr_path(it, attribute.str()));
    }
    keyed.emplace_back(sort_key(k, case_sensitive), it);
  }
  Status st;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto r = reverse ? values_less(b.first, a.first) : values_less(a.first, b.first);
    if (!r) {
      st = r.status();
      return false;
    }
    return *r;
  });
  if (!st.ok()) return st;
  List out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

CallArgs rest_args(const CallArgs& a, size_t from) {
  CallArgs r;
  r.line = a.line;
  for (size_t i = from; i < a.pos.size(); ++i) r.pos.push_back(a.pos[i]);
  r.kw = a.kw;
  return r;
}

}  // namespace

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
      for (size_t k = 0; k + 1 < off.size(); ++k) out.push_back(Value::string(v.str().substr(off[k], off[k + 1] - off[k])));
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
  if (obj.is_undefined()) return err("'{}' is undefined", obj.str().empty() ? std::string("value") : obj.str());
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
    return Value::string(obj.str().substr(off[static_cast<size_t>(i)], off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]));
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
      s += obj.str().substr(off[static_cast<size_t>(i)], off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
    }
  }
  if (obj.is_list()) return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  return Value::string(std::move(s));
}

bool has_method(const Value& obj, const std::string& n) {
  static const std::vector<std::string> str_m = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split",
                                                 "rsplit", "replace", "upper", "lower", "title", "capitalize",
                                                 "find", "rfind", "count", "join", "splitlines", "isdigit",
                                                 "isalpha", "isalnum", "isspace", "islower", "isupper", "format",
                                                 "index"};
  static const std::vector<std::string> dict_m = {"get", "items", "keys", "values"};
  static const std::vector<std::string> list_m = {"index", "count"};
  const std::vector<std::string>* m = obj.is_string() ? &str_m : obj.is_dict() ? &dict_m : obj.is_list() ? &list_m : nullptr;
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
      if (n == "items") out.push_back(Value::tuple({Value::string(k), v}));
      else if (n == "keys") out.push_back(Value::string(k));
      else out.push_back(v);
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
      if (!items[k].is_string()) return err("sequence item {}: expected str instance, {} found", k, items[k].type_name());
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
  if (n == "isdigit" || n == "isalpha" || n == "isalnum" || n == "isspace" || n == "islower" || n == "isupper") {
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

Expected<std::string> percent_format(const std::string& fmt, const Value& args) {
  List items = args.is_tuple() ? args.list_ref() : List{args};  // like Python: only a tuple spreads
  std::string out;
  size_t ai = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 >= fmt.size()) return err("incomplete format");
    const char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (ai >= items.size()) return err("not enough arguments for format string");
    const Value& v = items[ai++];
    if (c == 's') out += v.to_string();
    else if (c == 'r') out += v.repr();
    else if (c == 'd' || c == 'i') {
      if (!v.is_number()) return err("%d format: a real number is required, not {}", v.type_name());
      if (v.is_float() && !fits_int64(v.as_double())) return err("%d format: number out of range");
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int());
    } else {
      return err("unsupported format character '{}'", c);
    }
  }
  if (ai < items.size()) return err("not all arguments converted during string formatting");
  return out;
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
    GRIDQ_ASSIGN_OR_RETURN(Value r, call_method(Value::string(v.to_string()), n == "lower" ? "islower" : "isupper", none));
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
    if (!v.is_int() || !x.is_int() || x.as_int() == 0) return err("test 'divisibleby' needs non-zero integers");
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

Expected<Value> apply_filter(const std::string& n, const Value& v, CallArgs& a) {
  if (n == "safe" || (n == "list" && v.is_list() && !v.is_tuple())) return v;
  if (n == "tojson") {
    const Value& ind = arg(a, 0, "indent", kNone);
    int indent = -1;
    if (ind.is_int()) indent = static_cast<int>(ind.as_int());
    GRIDQ_ASSIGN_OR_RETURN(std::string s, to_json(v, indent));
    return Value::string(s);
  }
  if (n == "length" || n == "count") {
    if (v.is_string()) return Value::integer(static_cast<int64_t>(cp_offsets(v.str()).size() - 1));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.list_ref().size()));
    if (v.is_dict()) return Value::integer(static_cast<int64_t>(v.dict_ref().items.size()));
    if (v.is_undefined()) return Value::integer(0);
    return err("object of type '{}' has no len()", v.type_name());
  }
  if (n == "default" || n == "d") {
    const bool boolean = arg(a, 1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value::string(""));
    return v;
  }
  if (n == "string") return Value::string(v.to_string());
  if (n == "trim") return Value::string(py_strip(v.to_string(), arg(a, 0, "chars", kNone), 3));
  if (n == "upper") return Value::string(ascii_upper(v.to_string()));
  if (n == "lower") return Value::string(ascii_lower(v.to_string()));
  if (n == "capitalize") return Value::string(py_capitalize(v.to_string()));
  if (n == "title") {
    std::string s = v.to_string(), out;
    bool boundary = true;  // Jinja splits words at runs of -, whitespace, ( { [ <
    for (char c : s) {
      const bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' || c == '{' ||
                       c == '[' || c == '<';
      if (sep) {
        out += c;
        boundary = true;
      } else {
        out += boundary ? ascii_upper(std::string(1, c)) : ascii_lower(std::string(1, c));
        boundary = false;
      }
    }
    return Value::string(out);
  }
  if (n == "replace") {
    const Value &x = arg(a, 0, "old", kUndef), &y = arg(a, 1, "new", kUndef);
    GRIDQ_ASSIGN_OR_RETURN(int64_t c, to_int_arg(arg(a, 2, "count", Value::integer(-1)), "count"));
    if (c == 0 && a.pos.size() < 3) c = -1;
    return Value::string(py_replace(v.to_string(), x.to_string(), y.to_string(), c));
  }
  if (n == "escape" || n == "e" || n == "forceescape") return Value::string(html_escape(v.to_string()));
  if (n == "int") {
    const Value dflt = arg(a, 0, "default", Value::integer(0));  // a copy: arg() may return its temporary default
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float()) return fits_int64(v.as_double()) ? Value::integer(static_cast<int64_t>(v.as_double())) : dflt;
    if (v.is_string()) {
      std::string s = py_strip(v.str(), kNone, 3);
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == 0 && errno == 0) return Value::integer(i);
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0 && fits_int64(d)) return Value::integer(static_cast<int64_t>(d));
    }
    return dflt;
  }
  if (n == "float") {
    const Value dflt = arg(a, 0, "default", Value::floating(0.0));  // a copy: arg() may return its temporary default
    if (v.is_number()) return Value::floating(v.as_double());
    if (v.is_string()) {
      std::string s = py_strip(v.str(), kNone, 3);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end && *end == 0) return Value::floating(d);
    }
    return dflt;
  }
  if (n == "abs") {
    if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
      if (v.as_int() == INT64_MIN) return err("integer overflow in abs");
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    return err("bad operand type for abs(): '{}'", v.type_name());
  }
  if (n == "round") {
    if (!v.is_number()) return err("round needs a number, not {}", v.type_name());
    GRIDQ_ASSIGN_OR_RETURN(int64_t prec, to_int_arg(arg(a, 0, "precision", Value::integer(0)), "precision"));
    const std::string method = arg(a, 1, "method", Value::string("common")).to_string();
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = v.as_double() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    return Value::floating(r / scale);
  }
  if (n == "first" || n == "last") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    if (items.empty()) return Value::undefined("no first item");
    return n == "first" ? items.front() : items.back();
  }
  if (n == "list") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    return Value::list(std::move(items));
  }
  if (n == "reverse") {
    if (v.is_string()) {
      GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
      std::string s;
      for (auto it = items.rbegin(); it != items.rend(); ++it) s += it->str();
      return Value::string(s);
    }
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_dict()) return err("items filter needs a mapping, not {}", v.type_name());
    CallArgs none;
    return call_method(v, "items", none);
  }
  if (n == "dictsort") {
    if (!v.is_dict()) return err("dictsort needs a mapping");
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    const std::string by = arg(a, 1, "by", Value::string("key")).to_string();
    const bool rev = arg(a, 2, "reverse", Value::boolean(false)).truthy();
    CallArgs none;
    GRIDQ_ASSIGN_OR_RETURN(Value pairs, call_method(v, "items", none));
    GRIDQ_ASSIGN_OR_RETURN(List s, sorted(pairs.list_ref(), rev, cs, Value::string(by == "value" ? "1" : "0")));
    return Value::list(std::move(s));
  }
  if (n == "join") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    const std::string d = arg(a, 0, "d", Value::string("")).to_string();
    const Value& attribute = arg(a, 1, "attribute", kNone);
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += d;
      Value it = items[k];
      if (attribute.is_string() || attribute.is_int()) {
        GRIDQ_ASSIGN_OR_RETURN(it, attr_path(it, attribute.to_string()));
      }
      out += it.to_string();
    }
    return Value::string(out);
  }
  if (n == "sort") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    GRIDQ_ASSIGN_OR_RETURN(List s, sorted(std::move(items), arg(a, 0, "reverse", Value::boolean(false)).truthy(),
                                          arg(a, 1, "case_sensitive", Value::boolean(false)).truthy(),
                                          arg(a, 2, "attribute", kNone)));
    return Value::list(std::move(s));
  }
  if (n == "unique") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    const Value& attribute = arg(a, 1, "attribute", kNone);
    List out, keys;
    for (auto& it : items) {
      Value k = it;
      if (attribute.is_string()) {
        GRIDQ_ASSIGN_OR_RETURN(k, attr_path(it, attribute.str()));
      }
      k = sort_key(k, cs);
      bool seen = false;
      for (auto& s : keys)
        if (values_equal(s, k)) seen = true;
      if (!seen) {
        keys.push_back(k);
        out.push_back(it);
      }
    }
    return Value::list(std::move(out));
  }
  if (n == "min" || n == "max" || n == "sum") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    const Value& attribute = arg(a, n == "sum" ? 0 : 1, "attribute", kNone);
    if (attribute.is_string())
      for (auto& it : items) {
        GRIDQ_ASSIGN_OR_RETURN(it, attr_path(it, attribute.str()));
      }
    if (n == "sum") {
      Value acc = arg(a, 1, "start", Value::integer(0));
      for (auto& it : items) {
        if (!acc.is_number() || !it.is_number()) return err("sum needs numbers");
        int64_t r = 0;
        if (acc.is_float() || it.is_float()) {
          acc = Value::floating(acc.as_double() + it.as_double());
        } else if (__builtin_add_overflow(acc.as_int(), it.as_int(), &r)) {
          return err("integer overflow in sum");
        } else {
          acc = Value::integer(r);
        }
      }
      return acc;
    }
    if (items.empty()) return Value::undefined("no items");
    const bool cs = arg(a, 0, "case_sensitive", Value::boolean(false)).truthy();
    Value best = items[0];
    for (size_t k = 1; k < items.size(); ++k) {
      GRIDQ_ASSIGN_OR_RETURN(bool lt, values_less(sort_key(items[k], cs), sort_key(best, cs)));
      GRIDQ_ASSIGN_OR_RETURN(bool gt, values_less(sort_key(best, cs), sort_key(items[k], cs)));
      if ((n == "min" && lt) || (n == "max" && gt)) best = items[k];
    }
    return best;
  }
  if (n == "map") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    const Value& attribute = arg(a, 99, "attribute", kUndef);
    List out;
    if (!attribute.is_undefined()) {
      const Value& dflt = arg(a, 99, "default", kUndef);
      for (auto& it : items) {
        GRIDQ_ASSIGN_OR_RETURN(Value x, attr_path(it, attribute.to_string()));
        out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
      }
      return Value::list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string()) return err("map needs a filter name or attribute=");
    CallArgs rest = rest_args(a, 1);
    for (auto& it : items) {
      GRIDQ_ASSIGN_OR_RETURN(Value x, apply_filter(a.pos[0].str(), it, rest));
      out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (n == "select" || n == "reject" || n == "selectattr" || n == "rejectattr") {
    GRIDQ_ASSIGN_OR_RETURN(List items, iterate(v));
    const bool by_attr = n == "selectattr" || n == "rejectattr";
    const bool want = n == "select" || n == "selectattr";
    size_t ti = 0;
    std::string attribute;
    if (by_attr) {
      if (a.pos.empty()) return err("{} needs an attribute name", n);
      attribute = a.pos[0].to_string();
      ti = 1;
    }
    List out;
    for (auto& it : items) {
      Value x = it;
      if (by_attr) {
        GRIDQ_ASSIGN_OR_RETURN(x, attr_path(it, attribute));
      }
      bool r;
      if (a.pos.size() <= ti) {
        r = x.truthy();
      } else {
        CallArgs rest = rest_args(a, ti + 1);
        GRIDQ_ASSIGN_OR_RETURN(r, apply_test(a.pos[ti].to_string(), x, rest));
      }
      if (r == want) out.push_back(it);
    }
    return Value::list(std::move(out));
  }
  if (n == "attr") return get_attr(v, arg(a, 0, "name", kUndef).to_string());
  if (n == "indent") {
    const Value w = arg(a, 0, "width", Value::integer(4));  // a copy: arg() may return its temporary default
    const std::string ind = w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.as_int())), ' ');
    const bool first = arg(a, 1, "first", Value::boolean(false)).truthy();
    const bool blank = arg(a, 2, "blank", Value::boolean(false)).truthy();
    CallArgs none;
    GRIDQ_ASSIGN_OR_RETURN(Value lines_v, call_method(Value::string(v.to_string() + "\n"), "splitlines", none));
    const auto& lines = lines_v.list_ref();
    std::string rv;
    for (size_t k = 0; k < lines.size(); ++k) {
      const std::string& l = lines[k].str();
      if (k == 0) {
        rv = l;
        continue;
      }
      rv += "\n";
      if (blank || !l.empty()) rv += ind;
      rv += l;
    }
    if (first) rv = ind + rv;
    return Value::string(rv);
  }
  if (n == "format") {
    List args = a.pos;
    GRIDQ_ASSIGN_OR_RETURN(std::string s, percent_format(v.to_string(), Value::tuple(std::move(args))));
    return Value::string(s);
  }
  if (n == "wordcount") {
    GRIDQ_ASSIGN_OR_RETURN(List w, py_split(v.to_string(), kNone, -1));
    return Value::integer(static_cast<int64_t>(w.size()));
  }
  return err("no filter named '{}'", n);
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

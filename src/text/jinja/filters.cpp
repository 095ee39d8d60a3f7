// Jinja2's filters (builtins.h apply_filter).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "text/jinja/builtins.h"
#include "text/jinja/builtins_util.h"
#include "text/utf8.h"

namespace gridq::text::jinja {

using namespace detail;  // NOLINT(google-build-using-namespace): the shared helpers of the builtins

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
    const Value dflt =
        arg(a, 0, "default", Value::integer(0));  // a copy: arg() may return its temporary default
    if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
    if (v.is_float())
      return fits_int64(v.as_double()) ? Value::integer(static_cast<int64_t>(v.as_double())) : dflt;
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
    const Value dflt =
        arg(a, 0, "default", Value::floating(0.0));  // a copy: arg() may return its temporary default
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
    GRIDQ_ASSIGN_OR_RETURN(List s,
                           sorted(pairs.list_ref(), rev, cs, Value::string(by == "value" ? "1" : "0")));
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
    GRIDQ_ASSIGN_OR_RETURN(
        List s,
        sorted(std::move(items), arg(a, 0, "reverse", Value::boolean(false)).truthy(),
               arg(a, 1, "case_sensitive", Value::boolean(false)).truthy(), arg(a, 2, "attribute", kNone)));
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
    const std::string ind =
        w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.as_int())), ' ');
    const bool first = arg(a, 1, "first", Value::boolean(false)).truthy();
    const bool blank = arg(a, 2, "blank", Value::boolean(false)).truthy();
    CallArgs none;
    GRIDQ_ASSIGN_OR_RETURN(Value lines_v,
                           call_method(Value::string(v.to_string() + "\n"), "splitlines", none));
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

}  // namespace gridq::text::jinja

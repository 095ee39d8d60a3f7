#include "text/jinja/builtins_util.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/builtins.h"
#include "text/utf8.h"

namespace gridq::text::jinja::detail {

// Argument access: positional index `i` or keyword `name`, else `dflt`.
const Value& arg(const CallArgs& a, size_t i, const char* name, const Value& dflt) {
  if (i < a.pos.size()) return a.pos[i];
  for (const auto& [k, v] : a.kw)
    if (k == name) return v;
  return dflt;
}

bool fits_int64(double d) { return std::isfinite(d) && d > -9.2e18 && d < 9.2e18; }
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
  auto strip_it = [&](char32_t c) {
    return ws ? py_isspace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
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
    bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
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
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&#34;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
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

}  // namespace gridq::text::jinja::detail

namespace gridq::text::jinja {

using namespace detail;  // NOLINT(google-build-using-namespace): the shared helpers of the builtins

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
    if (c == 's')
      out += v.to_string();
    else if (c == 'r')
      out += v.repr();
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

}  // namespace gridq::text::jinja

#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/tool_parser_common.h"
#include "text/utf8.h"

namespace gridq::text::jinja {

const Value* Dict::find(const std::string& k) const {
  for (const auto& kv : items)
    if (kv.first == k) return &kv.second;
  return nullptr;
}

Value* Dict::find(const std::string& k) {
  for (auto& kv : items)
    if (kv.first == k) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& k, Value v) {
  if (Value* p = find(k)) {
    *p = std::move(v);
  } else {
    items.emplace_back(k, std::move(v));
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return floating(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return list(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value()));
      return dict(std::move(d));
    }
    default:
      return none();
  }
}

bool Value::same_object(const Value& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::kList:
      return list_ == o.list_;
    case Type::kDict:
      return dict_ == o.dict_;
    case Type::kCallable:
      return fn_ == o.fn_;
    default:
      return values_equal(*this, o);
  }
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return i_ != 0;
    case Type::kFloat:
      return f_ != 0.0;
    case Type::kString:
      return !str_.empty();
    case Type::kList:
      return !list_->empty();
    case Type::kDict:
      return !dict_->items.empty();
    case Type::kCallable:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return "list";
    case Type::kDict:
      return "dict";
    case Type::kCallable:
      return "function";
  }
  return "?";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // e.g. -1.2345e+02
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  const int exp = std::stoi(s.substr(e + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp >= 0) {
    const size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) {
      out = digits + std::string(ip - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, ip) + "." + digits.substr(ip);
    }
  } else {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return sign + out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_str_repr(const std::string& s) {
  const bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  const char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    int n = utf8_next(s, i, &cp);
    if (n <= 0) {
      n = 1;
      cp = 0xFFFD;
    }
    if (cp == static_cast<char32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0xAD) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned>(cp));
      out += b;
    } else {
      out.append(s, i, static_cast<size_t>(n));
    }
    i += static_cast<size_t>(n);
  }
  out += q;
  return out;
}

std::string Value::to_string() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return i_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(i_);
    case Type::kFloat:
      return py_float_repr(f_);
    case Type::kString:
      return str_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (type_) {
    case Type::kString:
      return py_str_repr(str_);
    case Type::kUndefined:
      return "Undefined";
    case Type::kList: {
      std::string out = is_tuple() ? "(" : "[";
      for (size_t k = 0; k < list_->size(); ++k) {
        if (k) out += ", ";
        out += (*list_)[k].repr();
      }
      if (is_tuple()) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Type::kDict: {
      if (dict_->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Type::kCallable:
      return "<function " + str_ + ">";
    default:
      return to_string();
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.str() == b.str();
    case Value::Type::kList: {
      const auto &x = a.list_ref(), &y = b.list_ref();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!values_equal(x[k], y[k])) return false;
      return true;
    }
    case Value::Type::kDict: {
      const auto &x = a.dict_ref(), &y = b.dict_ref();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    case Value::Type::kCallable:
      return a.same_object(b);
    default:
      return false;
  }
}

Expected<bool> values_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list_ref(), &y = b.list_ref();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (values_equal(x[k], y[k])) continue;
      return values_less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  return err("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

namespace {

// Same escaping as the tool parsers' JSON (Python json.dumps with ensure_ascii=False).
void json_str(const std::string& s, std::string& out) {
  out += '"';
  out += json_escape(s);
  out += '"';
}

Status json_rec(const Value& v, int indent, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return {};
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return {};
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return {};
    case Value::Type::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(d);
      return {};
    }
    case Value::Type::kString:
      json_str(v.str(), out);
      return {};
    case Value::Type::kList: {
      const auto& l = v.list_ref();
      if (l.empty()) {
        out += "[]";
        return {};
      }
      out += '[';
      for (size_t k = 0; k < l.size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        GRIDQ_RETURN_IF_ERROR(json_rec(l[k], indent, level + 1, out));
      }
      if (indent >= 0) newline(level);
      out += ']';
      return {};
    }
    case Value::Type::kDict: {
      const auto& d = v.dict_ref();
      if (d.items.empty()) {
        out += "{}";
        return {};
      }
      out += '{';
      bool first = true;
      for (const auto& [k, e] : d.items) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        json_str(k, out);
        out += ": ";
        GRIDQ_RETURN_IF_ERROR(json_rec(e, indent, level + 1, out));
      }
      if (indent >= 0) newline(level);
      out += '}';
      return {};
    }
    default:
      return err("Object of type {} is not JSON serializable", v.type_name());
  }
}

}  // namespace

Expected<std::string> to_json(const Value& v, int indent) {
  std::string out;
  GRIDQ_RETURN_IF_ERROR(json_rec(v, indent, 0, out));
  return out;
}

}  // namespace gridq::text::jinja

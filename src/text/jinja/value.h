// Runtime values of the Jinja engine: Python-like null/bool/int/float/str/list/dict plus Undefined and
// callables. Lists and dicts have reference semantics (shared), dicts keep insertion order, as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gridq::text::jinja {

class Value;
using List = std::vector<Value>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace() objects accept `{% set ns.attr = ... %}`
  const Value* find(const std::string& k) const;
  Value* find(const std::string& k);
  void set(const std::string& k, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
};

using NativeFn = std::function<Expected<Value>(CallArgs&)>;

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string name = {}) {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value none() { return with_type(Type::kNone); }
  static Value boolean(bool b) {
    Value v = with_type(Type::kBool);
    v.i_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v = with_type(Type::kInt);
    v.i_ = i;
    return v;
  }
  static Value floating(double f) {
    Value v = with_type(Type::kFloat);
    v.f_ = f;
    return v;
  }
  static Value string(std::string s) {
    Value v = with_type(Type::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value list(List l = {}) {
    Value v = with_type(Type::kList);
    v.list_ = std::make_shared<List>(std::move(l));
    return v;
  }
  // A Python tuple: behaves as a list but prints as (a, b).
  static Value tuple(List l) {
    Value v = list(std::move(l));
    v.i_ = 1;
    return v;
  }
  bool is_tuple() const { return type_ == Type::kList && i_ == 1; }
  static Value dict(Dict d = {}) {
    Value v = with_type(Type::kDict);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value callable(std::string name, NativeFn fn) {
    Value v = with_type(Type::kCallable);
    v.str_ = std::move(name);
    v.fn_ = std::make_shared<NativeFn>(std::move(fn));
    return v;
  }
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_callable() const { return type_ == Type::kCallable; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // also for bool
  double as_double() const { return type_ == Type::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return str_; }  // string text; undefined: its name; callable: its name
  List& list_ref() const { return *list_; }
  Dict& dict_ref() const { return *dict_; }
  const NativeFn& fn() const { return *fn_; }
  bool same_object(const Value& o) const;

  bool truthy() const;
  // Python str(): what {{ x }} prints (undefined prints nothing).
  std::string to_string() const;
  // Python repr().
  std::string repr() const;
  const char* type_name() const;

 private:
  static Value with_type(Type t) {
    Value v;
    v.type_ = t;
    return v;
  }
  Type type_ = Type::kUndefined;
  int64_t i_ = 0;
  double f_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<NativeFn> fn_;
};

// Python ==.
bool values_equal(const Value& a, const Value& b);
// Python <; error for unorderable types.
Expected<bool> values_less(const Value& a, const Value& b);

// Python float repr (shortest round trip; 1.0, 1e+16, 1e-05).
std::string py_float_repr(double d);
// Python repr of a str.
std::string py_str_repr(const std::string& s);

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent,
// separators=(',', ': ') if indent else (', ', ': ')), keys in insertion order.
Expected<std::string> to_json(const Value& v, int indent = -1);

// Python str.isspace() for one code point.
bool py_isspace(char32_t c);

}  // namespace gridq::text::jinja

// Template evaluator, expressions: values of expression nodes, operators, calls and filter chains
// (statements: template.cpp).
#include "text/jinja/template_impl.h"

namespace gridq::text::jinja::template_detail {

Expected<Value> Evaluator::filter_chain(const Expr& f, const Value& subject, const ScopePtr& sc) {
  Value base = subject;  // f.a: null (block filter), an inner filter, or the subject expression
  if (f.a && f.a->kind == Expr::Kind::kFilter) {
    GRIDQ_ASSIGN_OR_RETURN(base, filter_chain(*f.a, subject, sc));
  } else if (f.a) {
    GRIDQ_ASSIGN_OR_RETURN(base, eval(*f.a, sc));
  }
  GRIDQ_ASSIGN_OR_RETURN(CallArgs args, eval_args(f, sc));
  auto r = apply_filter(f.name, base, args);
  if (!r) return at(f.line, r.error());
  return r;
}

Expected<CallArgs> Evaluator::eval_args(const Expr& e, const ScopePtr& sc) {
  CallArgs a;
  a.line = e.line;
  for (const auto& x : e.items) {
    GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*x, sc));
    a.pos.push_back(v);
  }
  for (const auto& [k, x] : e.kwargs) {
    GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*x, sc));
    a.kw.emplace_back(k, v);
  }
  return a;
}

Expected<Value> Evaluator::eval(const Expr& e, const ScopePtr& sc) {
  auto r = eval_inner(e, sc);
  if (!r) return at(e.line, r.error());
  return r;
}

Expected<Value> Evaluator::eval_inner(const Expr& e, const ScopePtr& sc) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName: {
      const Value* v = sc->lookup(e.name);
      return v ? *v : Value::undefined(e.name);
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List l;
      for (const auto& x : e.items) {
        GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*x, sc));
        l.push_back(v);
      }
      return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(l)) : Value::list(std::move(l));
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t k = 0; k < e.items.size(); ++k) {
        GRIDQ_ASSIGN_OR_RETURN(Value key, eval(*e.items[k], sc));
        GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*e.values[k], sc));
        if (!key.is_string()) return err("dict keys must be strings here, got {}", key.type_name());
        d.set(key.str(), v);
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kAttr: {
      GRIDQ_ASSIGN_OR_RETURN(Value obj, eval(*e.a, sc));
      return get_attr(obj, e.name);
    }
    case Expr::Kind::kItem: {
      GRIDQ_ASSIGN_OR_RETURN(Value obj, eval(*e.a, sc));
      GRIDQ_ASSIGN_OR_RETURN(Value key, eval(*e.b, sc));
      return get_item(obj, key);
    }
    case Expr::Kind::kSlice: {
      GRIDQ_ASSIGN_OR_RETURN(Value obj, eval(*e.a, sc));
      Value parts[3] = {Value::none(), Value::none(), Value::none()};
      for (int k = 0; k < 3; ++k)
        if (e.items[static_cast<size_t>(k)]) {
          GRIDQ_ASSIGN_OR_RETURN(parts[k], eval(*e.items[static_cast<size_t>(k)], sc));
        }
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall: {
      Value fn;
      if (e.a->kind == Expr::Kind::kAttr) {
        GRIDQ_ASSIGN_OR_RETURN(Value obj, eval(*e.a->a, sc));
        if (has_method(obj, e.a->name)) {
          GRIDQ_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, sc));
          return call_method(obj, e.a->name, args);
        }
        GRIDQ_ASSIGN_OR_RETURN(fn, get_attr(obj, e.a->name));
      } else {
        GRIDQ_ASSIGN_OR_RETURN(fn, eval(*e.a, sc));
      }
      if (!fn.is_callable()) {
        if (fn.is_undefined()) return err("'{}' is undefined", fn.str());
        return err("'{}' object is not callable", fn.type_name());
      }
      GRIDQ_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, sc));
      return fn.fn()(args);
    }
    case Expr::Kind::kFilter:
      return filter_chain(e, Value(), sc);
    case Expr::Kind::kTest: {
      GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*e.a, sc));
      GRIDQ_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, sc));
      GRIDQ_ASSIGN_OR_RETURN(bool r, apply_test(e.name, v, args));
      return Value::boolean(r != e.negate);
    }
    case Expr::Kind::kUnary: {
      GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*e.a, sc));
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (v.is_float()) return Value::floating(e.name == "-" ? -v.as_double() : v.as_double());
      if (v.is_int() || v.is_bool()) {
        if (e.name == "-" && v.as_int() == INT64_MIN) return err("integer overflow");
        return Value::integer(e.name == "-" ? -v.as_int() : v.as_int());
      }
      return err("bad operand type for unary {}: '{}'", e.name, v.type_name());
    }
    case Expr::Kind::kBinary:
      return binary(e, sc);
    case Expr::Kind::kCond: {
      GRIDQ_ASSIGN_OR_RETURN(Value c, eval(*e.b, sc));
      if (c.truthy()) return eval(*e.a, sc);
      if (e.c) return eval(*e.c, sc);
      return Value::undefined("inline if expression evaluated to false and no else section was defined");
    }
  }
  return err("internal: unknown expression");
}

Expected<Value> Evaluator::binary(const Expr& e, const ScopePtr& sc) {
  const std::string& op = e.name;
  GRIDQ_ASSIGN_OR_RETURN(Value a, eval(*e.a, sc));
  if (op == "and") return a.truthy() ? eval(*e.b, sc) : Expected<Value>(a);
  if (op == "or") return a.truthy() ? Expected<Value>(a) : eval(*e.b, sc);
  GRIDQ_ASSIGN_OR_RETURN(Value b, eval(*e.b, sc));
  if (op == "~") return Value::string(a.to_string() + b.to_string());
  if (op == "==") return Value::boolean(values_equal(a, b));
  if (op == "!=") return Value::boolean(!values_equal(a, b));
  if (op == "<") return wrap_bool(values_less(a, b));
  if (op == ">") return wrap_bool(values_less(b, a));
  if (op == "<=") {
    GRIDQ_ASSIGN_OR_RETURN(bool g, values_less(b, a));
    return Value::boolean(!g);
  }
  if (op == ">=") {
    GRIDQ_ASSIGN_OR_RETURN(bool l, values_less(a, b));
    return Value::boolean(!l);
  }
  if (op == "in" || op == "notin") {
    CallArgs args;
    args.pos.push_back(b);
    GRIDQ_ASSIGN_OR_RETURN(bool r, apply_test("in", a, args));
    return Value::boolean(op == "in" ? r : !r);
  }
  if (a.is_undefined() || b.is_undefined())
    return err("'{}' is undefined", a.is_undefined() ? a.str() : b.str());
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      List l = a.list_ref();
      l.insert(l.end(), b.list_ref().begin(), b.list_ref().end());
      return Value::list(std::move(l));
    }
  }
  if (op == "*" && ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))) {
    const int64_t n = b.as_int();
    const uint64_t unit = std::max<uint64_t>(1, a.is_string() ? a.str().size() : a.list_ref().size());
    if (n > 0 && static_cast<uint64_t>(n) > 100000000 / unit) return err("repetition result is too large");
    if (a.is_string()) {
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += a.str();
      return Value::string(s);
    }
    List l;
    for (int64_t k = 0; k < n; ++k) l.insert(l.end(), a.list_ref().begin(), a.list_ref().end());
    return Value::list(std::move(l));
  }
  if (op == "%" && a.is_string()) {
    GRIDQ_ASSIGN_OR_RETURN(std::string s, percent_format(a.str(), b));
    return Value::string(s);
  }
  if (!a.is_number() || !b.is_number())
    return err("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
  const bool fl = a.is_float() || b.is_float() || op == "/";
  if (fl) {
    const double x = a.as_double(), y = b.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) return err("float division by zero");
    if (op == "+") return Value::floating(x + y);
    if (op == "-") return Value::floating(x - y);
    if (op == "*") return Value::floating(x * y);
    if (op == "/") return Value::floating(x / y);
    if (op == "//") return Value::floating(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::floating(m);
    }
    if (op == "**") return Value::floating(std::pow(x, y));
  } else {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::integer(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
    if (op == "//" || op == "%") {
      if (y == 0) return err("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return err("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t acc = 1, base = x, e = y;  // square-and-multiply with overflow checks
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return err("integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return err("integer overflow");
      }
      return Value::integer(acc);
    }
    return err("integer overflow in '{}'", op);
  }
  return err("unsupported operator '{}'", op);
}

Expected<Value> Evaluator::wrap_bool(Expected<bool> b) {
  if (!b) return b.error();
  return Value::boolean(*b);
}

}  // namespace gridq::text::jinja::template_detail

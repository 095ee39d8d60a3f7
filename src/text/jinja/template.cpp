#include "text/jinja/template.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"

namespace gridq::text::jinja {
namespace {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxDepth = 200;  // macro recursion limit

class Evaluator {
 public:
  explicit Evaluator(std::string name) : name_(std::move(name)) {}

  Expected<Flow> exec(const Body& body, const ScopePtr& sc, std::string& out) {
    for (const auto& s : body) {
      GRIDQ_ASSIGN_OR_RETURN(Flow f, exec_one(*s, sc, out));
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  // Prefixes a message with the template position unless an inner call already did.
  Error at(int line, const Error& e) const {
    if (e.message.rfind(name_ + ":", 0) == 0) return e;
    return err("{}:{}: {}", name_, line, e.message);
  }

  Expected<Flow> exec_one(const Stmt& s, const ScopePtr& sc, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput: {
        GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*s.expr, sc));
        out += v.to_string();
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k) {
          GRIDQ_ASSIGN_OR_RETURN(Value c, eval(*s.conds[k], sc));
          if (c.truthy()) return exec(s.bodies[k], sc, out);
        }
        return exec(s.else_body, sc, out);
      case Stmt::Kind::kFor:
        return exec_for(s, sc, out);
      case Stmt::Kind::kSet: {
        GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*s.expr, sc));
        if (!s.attr.empty()) {
          const Value* ns = sc->lookup(s.targets[0]);
          if (!ns || !ns->is_dict() || !ns->dict_ref().is_namespace)
            return at(s.line, err("cannot assign attribute on non-namespace object '{}'", s.targets[0]));
          ns->dict_ref().set(s.attr, v);
          return Flow::kNormal;
        }
        GRIDQ_RETURN_IF_ERROR(assign(s.targets, v, *sc, s.line));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        std::string captured;
        GRIDQ_RETURN_IF_ERROR(exec(s.body, sc, captured));
        Value v = Value::string(captured);
        if (s.filter) {
          GRIDQ_ASSIGN_OR_RETURN(v, filter_chain(*s.filter, v, sc));
        }
        sc->vars[s.targets[0]] = v;
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        sc->vars[s.text] = make_macro(s, sc);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kFilterBlock: {
        std::string captured;
        auto inner = std::make_shared<Scope>();
        inner->parent = sc;
        GRIDQ_RETURN_IF_ERROR(exec(s.body, inner, captured));
        GRIDQ_ASSIGN_OR_RETURN(Value v, filter_chain(*s.filter, Value::string(captured), sc));
        out += v.to_string();
        return Flow::kNormal;
      }
      case Stmt::Kind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = sc;
        for (size_t k = 0; k < s.targets.size(); ++k) {
          GRIDQ_ASSIGN_OR_RETURN(Value v, eval(*s.values[k], sc));
          inner->vars[s.targets[k]] = v;
        }
        GRIDQ_RETURN_IF_ERROR(exec(s.body, inner, out));
        return Flow::kNormal;
      }
      case Stmt::Kind::kPassBlock:
        return exec(s.body, sc, out);
    }
    return Flow::kNormal;
  }

  Status assign(const std::vector<std::string>& targets, const Value& v, Scope& sc, int line) {
    if (targets.size() == 1) {
      sc.vars[targets[0]] = v;
      return {};
    }
    auto items = iterate(v);
    if (!items) return at(line, items.error());
    if (items->size() != targets.size())
      return at(line, err("cannot unpack {} values into {} names", items->size(), targets.size()));
    for (size_t k = 0; k < targets.size(); ++k) sc.vars[targets[k]] = (*items)[k];
    return {};
  }

  Expected<Flow> exec_for(const Stmt& s, const ScopePtr& sc, std::string& out) {
    GRIDQ_ASSIGN_OR_RETURN(Value seq, eval(*s.expr, sc));
    auto all = iterate(seq);
    if (!all) return at(s.line, all.error());
    List items;
    if (s.cond) {
      for (auto& it : *all) {
        auto tmp = std::make_shared<Scope>();
        tmp->parent = sc;
        GRIDQ_RETURN_IF_ERROR(assign(s.targets, it, *tmp, s.line));
        GRIDQ_ASSIGN_OR_RETURN(Value c, eval(*s.cond, tmp));
        if (c.truthy()) items.push_back(it);
      }
    } else {
      items = std::move(*all);
    }
    if (items.empty()) {
      GRIDQ_RETURN_IF_ERROR(exec(s.else_body, sc, out));
      return Flow::kNormal;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto inner = std::make_shared<Scope>();
      inner->parent = sc;
      GRIDQ_RETURN_IF_ERROR(assign(s.targets, items[static_cast<size_t>(i)], *inner, s.line));
      Dict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(n - i));
      loop.set("revindex0", Value::integer(n - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::callable("cycle", [i](CallArgs& a) -> Expected<Value> {
                 if (a.pos.empty()) return err("no items for cycling given");
                 return a.pos[static_cast<size_t>(i) % a.pos.size()];
               }));
      inner->vars["loop"] = Value::dict(std::move(loop));
      GRIDQ_ASSIGN_OR_RETURN(Flow f, exec(s.body, inner, out));
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value make_macro(const Stmt& s, const ScopePtr& def_scope) {
    const Stmt* st = &s;
    std::weak_ptr<Scope> weak = def_scope;  // the macro lives in that scope: avoid a reference cycle
    return Value::callable(s.text, [this, st, weak](CallArgs& a) -> Expected<Value> {
      auto parent = weak.lock();
      if (!parent) return err("macro '{}' called after its scope ended", st->text);
      if (depth_ >= kMaxDepth) return err("macro '{}': recursion deeper than {}", st->text, kMaxDepth);
      if (a.pos.size() > st->params.size())
        return err("macro '{}' takes not more than {} argument(s)", st->text, st->params.size());
      auto sc = std::make_shared<Scope>();
      sc->parent = parent;
      for (size_t k = 0; k < st->params.size(); ++k) {
        const auto& [pname, dflt] = st->params[k];
        if (k < a.pos.size()) {
          sc->vars[pname] = a.pos[k];
          continue;
        }
        bool found = false;
        for (auto& [kn, kv] : a.kw) {
          if (kn == pname) {
            sc->vars[pname] = kv;
            found = true;
          }
        }
        if (found) continue;
        if (dflt) {
          GRIDQ_ASSIGN_OR_RETURN(Value d, eval(*dflt, sc));
          sc->vars[pname] = d;
        } else {
          sc->vars[pname] = Value::undefined(pname);
        }
      }
      for (auto& [kn, kv] : a.kw) {
        bool known = false;
        for (auto& p : st->params) known = known || p.first == kn;
        if (!known) return err("macro '{}' has no argument named '{}'", st->text, kn);
      }
      ++depth_;
      std::string out;
      auto r = exec(st->body, sc, out);
      --depth_;
      if (!r) return r.error();
      return Value::string(out);
    });
  }

  Expected<Value> filter_chain(const Expr& f, const Value& subject, const ScopePtr& sc) {
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

  Expected<CallArgs> eval_args(const Expr& e, const ScopePtr& sc) {
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

  Expected<Value> eval(const Expr& e, const ScopePtr& sc) {
    auto r = eval_inner(e, sc);
    if (!r) return at(e.line, r.error());
    return r;
  }

  Expected<Value> eval_inner(const Expr& e, const ScopePtr& sc) {
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

  Expected<Value> binary(const Expr& e, const ScopePtr& sc) {
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

  static Expected<Value> wrap_bool(Expected<bool> b) {
    if (!b) return b.error();
    return Value::boolean(*b);
  }

  std::string name_;
  int depth_ = 0;
};

}  // namespace

Expected<Template> Template::parse(std::string_view source, const TemplateOptions& opts) {
  GRIDQ_ASSIGN_OR_RETURN(auto toks, lex(source, opts.lex, opts.name));
  GRIDQ_ASSIGN_OR_RETURN(Body body, jinja::parse(toks, opts.name));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  t.name_ = opts.name;
  return t;
}

Expected<std::string> Template::render(const std::vector<std::pair<std::string, Value>>& vars) const {
  auto globals = std::make_shared<Scope>();
  for (auto& [k, v] : make_globals()) globals->vars[k] = v;
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  for (const auto& [k, v] : vars) root->vars[k] = v;
  Evaluator ev(name_);
  std::string out;
  GRIDQ_RETURN_IF_ERROR(ev.exec(*body_, root, out));
  return out;
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return err("{}: template context must be a JSON object", name_);
  std::vector<std::pair<std::string, Value>> vars;
  for (auto it = context.begin(); it != context.end(); ++it) vars.emplace_back(it.key(), Value::from_json(it.value()));
  return render(vars);
}

}  // namespace gridq::text::jinja

#include "text/jinja/template.h"

#include "text/jinja/template_impl.h"

namespace gridq::text::jinja {
namespace template_detail {

Expected<Flow> Evaluator::exec(const Body& body, const ScopePtr& sc, std::string& out) {
  for (const auto& s : body) {
    GRIDQ_ASSIGN_OR_RETURN(Flow f, exec_one(*s, sc, out));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Expected<Flow> Evaluator::exec_one(const Stmt& s, const ScopePtr& sc, std::string& out) {
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

Status Evaluator::assign(const std::vector<std::string>& targets, const Value& v, Scope& sc, int line) {
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

Expected<Flow> Evaluator::exec_for(const Stmt& s, const ScopePtr& sc, std::string& out) {
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
    loop.set("previtem",
             i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem",
             i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
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

Value Evaluator::make_macro(const Stmt& s, const ScopePtr& def_scope) {
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

}  // namespace template_detail

using template_detail::Evaluator;
using template_detail::Scope;

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
  for (auto it = context.begin(); it != context.end(); ++it)
    vars.emplace_back(it.key(), Value::from_json(it.value()));
  return render(vars);
}

}  // namespace gridq::text::jinja

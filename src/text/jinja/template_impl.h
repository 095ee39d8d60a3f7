// The template evaluator's class (template.cpp: statements and the entry points, template_eval.cpp:
// expressions), shared by those two files only.
#pragma once

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "text/jinja/parser.h"
#include "text/jinja/template.h"

namespace gridq::text::jinja::template_detail {

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

  Expected<Flow> exec(const Body& body, const ScopePtr& sc, std::string& out);

 private:
  // Prefixes a message with the template position unless an inner call already did.
  Error at(int line, const Error& e) const {
    if (e.message.rfind(name_ + ":", 0) == 0) return e;
    return err("{}:{}: {}", name_, line, e.message);
  }

  Expected<Flow> exec_one(const Stmt& s, const ScopePtr& sc, std::string& out);

  Status assign(const std::vector<std::string>& targets, const Value& v, Scope& sc, int line);

  Expected<Flow> exec_for(const Stmt& s, const ScopePtr& sc, std::string& out);

  Value make_macro(const Stmt& s, const ScopePtr& def_scope);

  Expected<Value> filter_chain(const Expr& f, const Value& subject, const ScopePtr& sc);

  Expected<CallArgs> eval_args(const Expr& e, const ScopePtr& sc);

  Expected<Value> eval(const Expr& e, const ScopePtr& sc);

  Expected<Value> eval_inner(const Expr& e, const ScopePtr& sc);

  Expected<Value> binary(const Expr& e, const ScopePtr& sc);

  static Expected<Value> wrap_bool(Expected<bool> b);

  std::string name_;
  int depth_ = 0;
};

}  // namespace gridq::text::jinja::template_detail

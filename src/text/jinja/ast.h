// Jinja template syntax tree. One node type per family keeps the parser and evaluator small; fields are used
// according to `kind` (see the comments).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace gridq::text::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // items
    kTuple,    // items
    kDict,     // items = keys, values
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[items[0]:items[1]:items[2]] (null entries = omitted)
    kCall,     // a(items, kwargs)
    kFilter,   // a | name(items, kwargs); a null for block filters
    kTest,     // a is [not] name(items)  (negate)
    kUnary,    // op a: "not", "-", "+"
    kBinary,   // a op b: + - * / // % ** ~ and or == != < <= > >= in notin
    kCond,     // a if b else c (c may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name / attribute / filter / test / operator
  ExprPtr a, b, c;
  std::vector<ExprPtr> items, values;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negate = false;
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // targets in expr [if cond] body, else_body
    kSet,       // targets (or attr target: ns.name) = expr
    kSetBlock,  // targets[0] = rendered body (then filter expr applied)
    kMacro,     // name(params with defaults) body
    kBreak,
    kContinue,
    kFilterBlock,  // body rendered, then filter expr applied (filter->a is null)
    kWith,         // targets[i] = values[i]; body in a new scope
    kPassBlock,    // body rendered as is (e.g. {% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr, cond, filter;
  std::vector<std::string> targets;
  std::string attr;  // kSet with `ns.attr = ...`
  std::vector<ExprPtr> conds, values;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters (default may be null)
};

}  // namespace gridq::text::jinja

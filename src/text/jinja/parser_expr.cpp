// Template parser, expressions: precedence climbing from tuples down to primaries, postfix subscripts and
// calls, filter chains (statements: parser.cpp).
#include "text/jinja/parser_impl.h"

namespace gridq::text::jinja::parser_detail {

ExprPtr Parser::node(Expr::Kind k, int line) {
  auto e = std::make_shared<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

// A possibly comma-separated expression (implicit tuple).
Expected<ExprPtr> Parser::tuple_expr(bool with_cond) {
  const int line = cur().line;
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr first, with_cond ? expr() : or_expr());
  if (!is_op(",")) return first;
  auto t = node(Expr::Kind::kTuple, line);
  t->items.push_back(first);
  while (is_op(",")) {
    ++p_;
    if (cur().type == T::kBlockEnd || cur().type == T::kVarEnd || is_op(")") || is_name("if")) break;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr e, with_cond ? expr() : or_expr());
    t->items.push_back(e);
  }
  return t;
}

Expected<ExprPtr> Parser::expr() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, or_expr());
  while (is_name("if")) {
    const int line = cur().line;
    ++p_;
    auto c = node(Expr::Kind::kCond, line);
    c->a = a;
    GRIDQ_ASSIGN_OR_RETURN(c->b, or_expr());
    if (is_name("else")) {
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(c->c, expr());
    }
    a = c;
  }
  return a;
}

ExprPtr Parser::binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
  auto e = node(Expr::Kind::kBinary, line);
  e->name = op;
  e->a = std::move(a);
  e->b = std::move(b);
  return e;
}

Expected<ExprPtr> Parser::or_expr() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, and_expr());
  while (is_name("or")) {
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, and_expr());
    a = binary("or", a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::and_expr() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, not_expr());
  while (is_name("and")) {
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, not_expr());
    a = binary("and", a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::not_expr() {
  if (is_name("not")) {
    const int line = cur().line;
    ++p_;
    auto e = node(Expr::Kind::kUnary, line);
    e->name = "not";
    GRIDQ_ASSIGN_OR_RETURN(e->a, not_expr());
    return e;
  }
  return compare();
}

Expected<ExprPtr> Parser::compare() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, math1());
  while (true) {
    const int line = cur().line;
    std::string op;
    if (cur().type == T::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      ++p_;
    } else if (is_name("in")) {
      op = "in";
      ++p_;
    } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
      op = "notin";
      p_ += 2;
    } else {
      break;
    }
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, math1());
    a = binary(op, a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::math1() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, concat());
  while (is_op("+") || is_op("-")) {
    const std::string op = cur().text;
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, concat());
    a = binary(op, a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::concat() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, math2());
  while (is_op("~")) {
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, math2());
    a = binary("~", a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::math2() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, pow_expr());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = cur().text;
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, pow_expr());
    a = binary(op, a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::pow_expr() {
  GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, unary(true));
  while (is_op("**")) {
    const int line = cur().line;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, unary(true));
    a = binary("**", a, b, line);
  }
  return a;
}

Expected<ExprPtr> Parser::unary(bool with_filter) {
  ExprPtr e;
  const int line = cur().line;
  if (is_op("-") || is_op("+")) {
    e = node(Expr::Kind::kUnary, line);
    e->name = cur().text;
    ++p_;
    GRIDQ_ASSIGN_OR_RETURN(e->a, unary(false));
  } else {
    GRIDQ_ASSIGN_OR_RETURN(e, primary());
    GRIDQ_ASSIGN_OR_RETURN(e, postfix(e));
  }
  if (with_filter) {
    GRIDQ_ASSIGN_OR_RETURN(e, filter_expr(e));
  }
  return e;
}

Expected<ExprPtr> Parser::primary() {
  const Token& tk = cur();
  const int line = tk.line;
  if (tk.type == T::kName) {
    ++p_;
    if (tk.text == "true" || tk.text == "True") return lit(Value::boolean(true), line);
    if (tk.text == "false" || tk.text == "False") return lit(Value::boolean(false), line);
    if (tk.text == "none" || tk.text == "None") return lit(Value::none(), line);
    auto e = node(Expr::Kind::kName, line);
    e->name = tk.text;
    return e;
  }
  if (tk.type == T::kString) {
    std::string s;
    while (cur().type == T::kString) s += t_[p_++].text;  // adjacent literals concatenate
    return lit(Value::string(s), line);
  }
  if (tk.type == T::kInt) {
    ++p_;
    return lit(Value::integer(tk.i), line);
  }
  if (tk.type == T::kFloat) {
    ++p_;
    return lit(Value::floating(tk.f), line);
  }
  if (is_op("(")) {
    ++p_;
    if (is_op(")")) {
      ++p_;
      return node(Expr::Kind::kTuple, line);
    }
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr e, tuple_expr());
    GRIDQ_RETURN_IF_ERROR(expect_op(")"));
    return e;
  }
  if (is_op("[")) {
    ++p_;
    auto e = node(Expr::Kind::kList, line);
    while (!is_op("]")) {
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr x, expr());
      e->items.push_back(x);
      if (!is_op(",")) break;
      ++p_;
    }
    GRIDQ_RETURN_IF_ERROR(expect_op("]"));
    return e;
  }
  if (is_op("{")) {
    ++p_;
    auto e = node(Expr::Kind::kDict, line);
    while (!is_op("}")) {
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr k, expr());
      GRIDQ_RETURN_IF_ERROR(expect_op(":"));
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr v, expr());
      e->items.push_back(k);
      e->values.push_back(v);
      if (!is_op(",")) break;
      ++p_;
    }
    GRIDQ_RETURN_IF_ERROR(expect_op("}"));
    return e;
  }
  return fail("unexpected token '" + tk.text + "' in expression");
}

ExprPtr Parser::lit(Value v, int line) {
  auto e = node(Expr::Kind::kLiteral, line);
  e->value = std::move(v);
  return e;
}

Expected<ExprPtr> Parser::postfix(ExprPtr e) {
  while (true) {
    const int line = cur().line;
    if (is_op(".")) {
      ++p_;
      if (cur().type == T::kName) {
        auto a = node(Expr::Kind::kAttr, line);
        a->a = e;
        a->name = t_[p_++].text;
        e = a;
      } else if (cur().type == T::kInt) {
        auto a = node(Expr::Kind::kItem, line);
        a->a = e;
        a->b = lit(Value::integer(t_[p_++].i), line);
        e = a;
      } else {
        return fail("expected an attribute name after '.'");
      }
    } else if (is_op("[")) {
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(e, subscript(e, line));
      GRIDQ_RETURN_IF_ERROR(expect_op("]"));
    } else if (is_op("(")) {
      GRIDQ_ASSIGN_OR_RETURN(e, call(e));
    } else {
      return e;
    }
  }
}

Expected<ExprPtr> Parser::subscript(ExprPtr obj, int line) {
  ExprPtr parts[3];
  int n = 0;
  bool is_slice = false;
  while (true) {
    if (is_op(":")) {
      is_slice = true;
      ++p_;
      ++n;
      if (n > 2) return fail("too many ':' in slice");
      continue;
    }
    if (is_op("]")) break;
    GRIDQ_ASSIGN_OR_RETURN(parts[n], expr());
    if (!is_op(":")) break;
  }
  if (!is_slice) {
    auto e = node(Expr::Kind::kItem, line);
    e->a = obj;
    e->b = parts[0];
    if (!e->b) return fail("empty subscript");
    return e;
  }
  auto e = node(Expr::Kind::kSlice, line);
  e->a = obj;
  e->items = {parts[0], parts[1], parts[2]};
  return e;
}

Status Parser::call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
  GRIDQ_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
      const std::string k = cur().text;
      p_ += 2;
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr v, expr());
      kwargs.emplace_back(k, v);
    } else {
      if (!kwargs.empty()) return fail("positional argument follows keyword argument");
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr v, expr());
      args.push_back(v);
    }
    if (!is_op(",")) break;
    ++p_;
  }
  return expect_op(")");
}

Expected<ExprPtr> Parser::call(ExprPtr fn) {
  auto e = node(Expr::Kind::kCall, cur().line);
  e->a = fn;
  GRIDQ_RETURN_IF_ERROR(call_args(e->items, e->kwargs));
  return e;
}

// One `| name(args)` (or, for {% filter %}, a bare `name(args)`) and any that follow.
Expected<ExprPtr> Parser::filter_chain(ExprPtr subject, bool first_has_pipe) {
  bool first = true;
  while ((first && !first_has_pipe) || is_op("|")) {
    if (!(first && !first_has_pipe)) ++p_;
    first = false;
    auto f = node(Expr::Kind::kFilter, cur().line);
    GRIDQ_ASSIGN_OR_RETURN(f->name, expect_name());
    while (is_op(".") && peek().type == T::kName) {  // dotted filter names
      f->name += "." + peek().text;
      p_ += 2;
    }
    if (is_op("(")) GRIDQ_RETURN_IF_ERROR(call_args(f->items, f->kwargs));
    f->a = subject;
    subject = f;
  }
  return subject;
}

Expected<ExprPtr> Parser::filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      GRIDQ_ASSIGN_OR_RETURN(e, filter_chain(e));
    } else if (is_name("is")) {
      const int line = cur().line;
      ++p_;
      auto t = node(Expr::Kind::kTest, line);
      t->a = e;
      if (is_name("not")) {
        t->negate = true;
        ++p_;
      }
      GRIDQ_ASSIGN_OR_RETURN(t->name, expect_name());
      if (is_op("(")) {
        GRIDQ_RETURN_IF_ERROR(call_args(t->items, t->kwargs));
      } else if ((cur().type == T::kName || cur().type == T::kString || cur().type == T::kInt ||
                  cur().type == T::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) return fail("you cannot chain multiple tests with is");
        GRIDQ_ASSIGN_OR_RETURN(ExprPtr arg, primary());
        GRIDQ_ASSIGN_OR_RETURN(arg, postfix(arg));
        t->items.push_back(arg);
      }
      e = t;
    } else if (is_op("(")) {
      GRIDQ_ASSIGN_OR_RETURN(e, call(e));
    } else {
      return e;
    }
  }
}

}  // namespace gridq::text::jinja::parser_detail

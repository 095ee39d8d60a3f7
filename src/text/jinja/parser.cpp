#include "text/jinja/parser.h"

#include <set>

namespace gridq::text::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name) : t_(t), name_(name) {}

  Expected<Body> run() {
    Body body;
    std::string end;
    GRIDQ_RETURN_IF_ERROR(statements(body, {}, &end));
    if (!end.empty()) return fail("unexpected '" + end + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == T::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::kName && cur().text == n; }
  Error fail(const std::string& m) const { return err("{}:{}: syntax error: {}", name_, cur().line, m); }
  Status expect_op(const char* op) {
    if (!is_op(op)) return fail(std::string("expected '") + op + "'");
    ++p_;
    return {};
  }
  Status expect_block_end() {
    if (cur().type != T::kBlockEnd) return fail("expected end of statement block '%}'");
    ++p_;
    return {};
  }
  Expected<std::string> expect_name() {
    if (cur().type != T::kName) return fail("expected a name");
    return t_[p_++].text;
  }

  // Parses statements until a block tag whose keyword is in `ends` ({% end... %}); leaves p_ after that
  // keyword and stores it in *end ("" at end of input).
  Status statements(Body& body, const std::set<std::string>& ends, std::string* end) {
    while (true) {
      const Token& tk = cur();
      if (tk.type == T::kEof) {
        if (!ends.empty()) return fail("unexpected end of template, expected one of the end tags");
        *end = "";
        return {};
      }
      if (tk.type == T::kData) {
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = tk.text;
        s->line = tk.line;
        body.push_back(s);
        ++p_;
        continue;
      }
      if (tk.type == T::kVarBegin) {
        ++p_;
        auto s = std::make_shared<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = tk.line;
        GRIDQ_ASSIGN_OR_RETURN(s->expr, tuple_expr());
        if (cur().type != T::kVarEnd) return fail("expected end of print statement '}}'");
        ++p_;
        body.push_back(s);
        continue;
      }
      if (tk.type != T::kBlockBegin) return fail("unexpected token");
      ++p_;
      if (cur().type != T::kName) return fail("expected a statement name after '{%'");
      const std::string kw = cur().text;
      if (ends.count(kw)) {
        ++p_;
        *end = kw;
        return {};
      }
      GRIDQ_RETURN_IF_ERROR(statement(body));
    }
  }

  Status statement(Body& body) {
    const std::string kw = cur().text;
    const int line = cur().line;
    ++p_;
    auto s = std::make_shared<Stmt>();
    s->line = line;
    std::string end;
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      while (true) {
        GRIDQ_ASSIGN_OR_RETURN(auto c, tuple_expr());
        GRIDQ_RETURN_IF_ERROR(expect_block_end());
        Body b;
        GRIDQ_RETURN_IF_ERROR(statements(b, {"elif", "else", "endif"}, &end));
        s->conds.push_back(c);
        s->bodies.push_back(std::move(b));
        if (end == "elif") continue;
        if (end == "else") {
          GRIDQ_RETURN_IF_ERROR(expect_block_end());
          GRIDQ_RETURN_IF_ERROR(statements(s->else_body, {"endif"}, &end));
        }
        break;
      }
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      GRIDQ_RETURN_IF_ERROR(targets(s->targets));
      if (!is_name("in")) return fail("expected 'in' in for loop");
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(s->expr, tuple_expr(/*with_cond=*/false));
      if (is_name("if")) {
        ++p_;
        GRIDQ_ASSIGN_OR_RETURN(s->cond, expr());
      }
      if (is_name("recursive")) return fail("recursive for loops are not supported");
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
      GRIDQ_RETURN_IF_ERROR(statements(s->body, {"else", "endfor"}, &end));
      if (end == "else") {
        GRIDQ_RETURN_IF_ERROR(expect_block_end());
        GRIDQ_RETURN_IF_ERROR(statements(s->else_body, {"endfor"}, &end));
      }
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "set") {
      if (cur().type == T::kName && peek().type == T::kOp && peek().text == "." && peek(2).type == T::kName) {
        s->kind = Stmt::Kind::kSet;
        s->targets.push_back(cur().text);
        s->attr = peek(2).text;
        p_ += 3;
      } else {
        GRIDQ_RETURN_IF_ERROR(targets(s->targets));
      }
      if (is_op("=")) {
        ++p_;
        s->kind = Stmt::Kind::kSet;
        GRIDQ_ASSIGN_OR_RETURN(s->expr, tuple_expr());
        GRIDQ_RETURN_IF_ERROR(expect_block_end());
      } else {
        if (!s->attr.empty() || s->targets.size() != 1) return fail("block set needs one plain name");
        s->kind = Stmt::Kind::kSetBlock;
        if (is_op("|")) {
          GRIDQ_ASSIGN_OR_RETURN(s->filter, filter_chain(nullptr));
        }
        GRIDQ_RETURN_IF_ERROR(expect_block_end());
        GRIDQ_RETURN_IF_ERROR(statements(s->body, {"endset"}, &end));
        GRIDQ_RETURN_IF_ERROR(expect_block_end());
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      GRIDQ_ASSIGN_OR_RETURN(s->text, expect_name());
      GRIDQ_RETURN_IF_ERROR(expect_op("("));
      while (!is_op(")")) {
        GRIDQ_ASSIGN_OR_RETURN(std::string pn, expect_name());
        ExprPtr dflt;
        if (is_op("=")) {
          ++p_;
          GRIDQ_ASSIGN_OR_RETURN(dflt, expr());
        }
        s->params.emplace_back(pn, dflt);
        if (!is_op(",")) break;
        ++p_;
      }
      GRIDQ_RETURN_IF_ERROR(expect_op(")"));
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
      GRIDQ_RETURN_IF_ERROR(statements(s->body, {"endmacro"}, &end));
      if (cur().type == T::kName) ++p_;  // {% endmacro name %}
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      GRIDQ_ASSIGN_OR_RETURN(s->filter, filter_chain(nullptr, /*first_has_pipe=*/false));
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
      GRIDQ_RETURN_IF_ERROR(statements(s->body, {"endfilter"}, &end));
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "with") {
      s->kind = Stmt::Kind::kWith;
      while (cur().type == T::kName) {
        s->targets.push_back(cur().text);
        ++p_;
        GRIDQ_RETURN_IF_ERROR(expect_op("="));
        GRIDQ_ASSIGN_OR_RETURN(auto v, expr());
        s->values.push_back(v);
        if (!is_op(",")) break;
        ++p_;
      }
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
      GRIDQ_RETURN_IF_ERROR(statements(s->body, {"endwith"}, &end));
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "generation") {
      s->kind = Stmt::Kind::kPassBlock;
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
      GRIDQ_RETURN_IF_ERROR(statements(s->body, {"endgeneration"}, &end));
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else if (kw == "print") {
      s->kind = Stmt::Kind::kOutput;
      GRIDQ_ASSIGN_OR_RETURN(s->expr, tuple_expr());
      GRIDQ_RETURN_IF_ERROR(expect_block_end());
    } else {
      --p_;
      return fail("unknown or unsupported statement '" + kw + "'");
    }
    body.push_back(s);
    return {};
  }

  Status targets(std::vector<std::string>& out) {
    const bool paren = is_op("(");
    if (paren) ++p_;
    while (true) {
      GRIDQ_ASSIGN_OR_RETURN(std::string n, expect_name());
      out.push_back(n);
      if (!is_op(",")) break;
      ++p_;
      if (!paren && cur().type != T::kName) break;
    }
    if (paren) GRIDQ_RETURN_IF_ERROR(expect_op(")"));
    return {};
  }

  ExprPtr node(Expr::Kind k, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // A possibly comma-separated expression (implicit tuple).
  Expected<ExprPtr> tuple_expr(bool with_cond = true) {
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

  Expected<ExprPtr> expr() {
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

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(Expr::Kind::kBinary, line);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  Expected<ExprPtr> or_expr() {
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, and_expr());
    while (is_name("or")) {
      const int line = cur().line;
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, and_expr());
      a = binary("or", a, b, line);
    }
    return a;
  }
  Expected<ExprPtr> and_expr() {
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, not_expr());
    while (is_name("and")) {
      const int line = cur().line;
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, not_expr());
      a = binary("and", a, b, line);
    }
    return a;
  }
  Expected<ExprPtr> not_expr() {
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
  Expected<ExprPtr> compare() {
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, math1());
    while (true) {
      const int line = cur().line;
      std::string op;
      if (cur().type == T::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
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
  Expected<ExprPtr> math1() {
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
  Expected<ExprPtr> concat() {
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, math2());
    while (is_op("~")) {
      const int line = cur().line;
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, math2());
      a = binary("~", a, b, line);
    }
    return a;
  }
  Expected<ExprPtr> math2() {
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
  Expected<ExprPtr> pow_expr() {
    GRIDQ_ASSIGN_OR_RETURN(ExprPtr a, unary(true));
    while (is_op("**")) {
      const int line = cur().line;
      ++p_;
      GRIDQ_ASSIGN_OR_RETURN(ExprPtr b, unary(true));
      a = binary("**", a, b, line);
    }
    return a;
  }
  Expected<ExprPtr> unary(bool with_filter) {
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

  Expected<ExprPtr> primary() {
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

  ExprPtr lit(Value v, int line) {
    auto e = node(Expr::Kind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  Expected<ExprPtr> postfix(ExprPtr e) {
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

  Expected<ExprPtr> subscript(ExprPtr obj, int line) {
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

  Status call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
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

  Expected<ExprPtr> call(ExprPtr fn) {
    auto e = node(Expr::Kind::kCall, cur().line);
    e->a = fn;
    GRIDQ_RETURN_IF_ERROR(call_args(e->items, e->kwargs));
    return e;
  }

  // One `| name(args)` (or, for {% filter %}, a bare `name(args)`) and any that follow.
  Expected<ExprPtr> filter_chain(ExprPtr subject, bool first_has_pipe = true) {
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

  Expected<ExprPtr> filter_expr(ExprPtr e) {
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

  const std::vector<Token>& t_;
  std::string name_;
  size_t p_ = 0;
};

}  // namespace

Expected<Body> parse(const std::vector<Token>& tokens, const std::string& name) {
  Parser p(tokens, name);
  return p.run();
}

}  // namespace gridq::text::jinja

// The template parser's class (parser.cpp: statements, parser_expr.cpp: expressions), shared by its two
// files only.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/parser.h"

namespace gridq::text::jinja::parser_detail {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name) : t_(t), name_(name) {}

  Expected<Body> run();

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
  Status statements(Body& body, const std::set<std::string>& ends, std::string* end);

  Status statement(Body& body);

  Status targets(std::vector<std::string>& out);

  ExprPtr node(Expr::Kind k, int line);

  // A possibly comma-separated expression (implicit tuple).
  Expected<ExprPtr> tuple_expr(bool with_cond = true);

  Expected<ExprPtr> expr();

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line);

  Expected<ExprPtr> or_expr();
  Expected<ExprPtr> and_expr();
  Expected<ExprPtr> not_expr();
  Expected<ExprPtr> compare();
  Expected<ExprPtr> math1();
  Expected<ExprPtr> concat();
  Expected<ExprPtr> math2();
  Expected<ExprPtr> pow_expr();
  Expected<ExprPtr> unary(bool with_filter);

  Expected<ExprPtr> primary();

  ExprPtr lit(Value v, int line);

  Expected<ExprPtr> postfix(ExprPtr e);

  Expected<ExprPtr> subscript(ExprPtr obj, int line);

  Status call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs);

  Expected<ExprPtr> call(ExprPtr fn);

  // One `| name(args)` (or, for {% filter %}, a bare `name(args)`) and any that follow.
  Expected<ExprPtr> filter_chain(ExprPtr subject, bool first_has_pipe = true);

  Expected<ExprPtr> filter_expr(ExprPtr e);

  const std::vector<Token>& t_;
  std::string name_;
  size_t p_ = 0;
};

}  // namespace gridq::text::jinja::parser_detail

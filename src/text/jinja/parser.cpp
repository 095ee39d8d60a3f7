// Template parser, statements: {% if %}, {% for %}, {% set %}, {% macro %}, ... (expressions:
// parser_expr.cpp).
#include "text/jinja/parser.h"

#include "text/jinja/parser_impl.h"

namespace gridq::text::jinja {
namespace parser_detail {

Expected<Body> Parser::run() {
  Body body;
  std::string end;
  GRIDQ_RETURN_IF_ERROR(statements(body, {}, &end));
  if (!end.empty()) return fail("unexpected '" + end + "'");
  return body;
}

// Parses statements until a block tag whose keyword is in `ends` ({% end... %}); leaves p_ after that
// keyword and stores it in *end ("" at end of input).
Status Parser::statements(Body& body, const std::set<std::string>& ends, std::string* end) {
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

Status Parser::statement(Body& body) {
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

Status Parser::targets(std::vector<std::string>& out) {
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

}  // namespace parser_detail

Expected<Body> parse(const std::vector<Token>& tokens, const std::string& name) {
  parser_detail::Parser p(tokens, name);
  return p.run();
}

}  // namespace gridq::text::jinja

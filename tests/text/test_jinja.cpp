// Jinja engine: feature snippets compared with python jinja2's output (jinja_cases.json, produced by
// gen_jinja_cases.py with the environment transformers uses), plus error reporting.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "text/jinja/template.h"

namespace gridq::text::jinja {
namespace {

using ojson = nlohmann::ordered_json;

Expected<std::string> render(const std::string& src, const ojson& ctx = ojson::object()) {
  TemplateOptions o;
  o.name = "t";
  auto t = Template::parse(src, o);
  if (!t) return t.error();
  return t->render(ctx);
}

TEST(Jinja, MatchesJinja2OnFeatureSnippets) {
  std::ifstream f(std::string(GRIDQ_SOURCE_DIR) + "/tests/text/jinja_cases.json");
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const ojson j = ojson::parse(ss.str());
  ASSERT_GE(j["cases"].size(), 40u);
  for (const auto& c : j["cases"]) {
    const std::string src = c["template"].get<std::string>();
    auto r = render(src, j["context"]);
    ASSERT_TRUE(r.ok()) << src << "\n" << r.message();
    EXPECT_EQ(*r, c["expected"].get<std::string>()) << "template: " << src;
  }
}

TEST(Jinja, SyntaxErrorNamesTheLine) {
  auto r = render("line1\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("t:3:"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("syntax error"), std::string::npos) << r.message();
}

TEST(Jinja, UnclosedBlockIsAnError) {
  auto r = render("{% for x in y %}abc");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("syntax error"), std::string::npos) << r.message();
  EXPECT_FALSE(render("{% if x %}{% endfor %}").ok());
  EXPECT_FALSE(render("{{ 'abc }}").ok());
  EXPECT_FALSE(render("{# never closed").ok());
  EXPECT_FALSE(render("{% include 'x' %}").ok());
}

TEST(Jinja, RaiseExceptionCarriesMessageAndLine) {
  auto r = render("a\nb\n{{ raise_exception('bad role: ' ~ role) }}", ojson{{"role", "robot"}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("t:3:"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("bad role: robot"), std::string::npos) << r.message();
  // Inside a macro called from another line, the innermost line is reported once.
  auto m = render("{% macro f() %}\n{{ raise_exception('deep') }}{% endmacro %}\n\n{{ f() }}");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("t:2: raise_exception: deep"), std::string::npos) << m.message();
}

TEST(Jinja, RuntimeErrorsAreValues) {
  EXPECT_FALSE(render("{{ x.y.z }}").ok());          // attribute of undefined
  EXPECT_FALSE(render("{{ 'a' + 1 }}").ok());        // str + int
  EXPECT_FALSE(render("{{ 1 // 0 }}").ok());
  EXPECT_FALSE(render("{{ undefined_fn() }}").ok());
  EXPECT_FALSE(render("{{ 3 | nosuchfilter }}").ok());
  EXPECT_FALSE(render("{{ 3 is nosuchtest }}").ok());
  EXPECT_FALSE(render("{% set d = {} %}{% set d.x = 1 %}").ok());  // not a namespace
  EXPECT_FALSE(render("{{ 9223372036854775807 + 1 }}").ok());       // no silent wraparound
  EXPECT_FALSE(render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").ok());  // recursion limit
  EXPECT_FALSE(render("{{ x | tojson }}").ok());     // undefined is not JSON
}

TEST(Jinja, ContextMustBeAnObject) {
  auto t = Template::parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(ojson::array()).ok());
}

TEST(Jinja, TojsonKeepsOrderAndDoesNotEscape) {
  // transformers' tojson: json.dumps(ensure_ascii=False), ", " / ": " separators, insertion order.
  const ojson ctx = ojson::parse(R"({"v": {"z": "<&>'é", "a": [1, 2.0, null, true], "m": {}}})");
  auto r = render("{{ v | tojson }}", ctx);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, R"({"z": "<&>'é", "a": [1, 2.0, null, true], "m": {}})");
}

TEST(Jinja, TrailingNewlineAndCrlf) {
  // Jinja2 drops one trailing newline of the source and normalises \r\n.
  EXPECT_EQ(*render("a\r\nb\n"), "a\nb");
  EXPECT_EQ(*render("a\n\n"), "a\n");
}

}  // namespace
}  // namespace gridq::text::jinja

// Regex, choice and GBNF front ends, the matcher's incremental API, and the compile limits.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace gridq::grammar {
namespace {

std::shared_ptr<const Grammar> must(InputKind k, const std::string& text, const CompileOptions& o = {}) {
  auto g = compile(k, text, o);
  EXPECT_TRUE(g.ok()) << text << ": " << g.message();
  return g.ok() ? *g : nullptr;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance_bytes(text) == text.size() && m.accepting();
}

TEST(GrammarRegex, FullMatchSemantics) {
  auto g = must(InputKind::kRegex, "(ab|cd)+x?");
  EXPECT_TRUE(accepts(g, "ab"));
  EXPECT_TRUE(accepts(g, "abcdx"));
  EXPECT_FALSE(accepts(g, "abx ab"));
  EXPECT_FALSE(accepts(g, ""));
  auto anchored = must(InputKind::kRegex, "^a$");  // anchors are no-ops for a whole-output regex
  EXPECT_TRUE(accepts(anchored, "a"));
}

TEST(GrammarRegex, CountedRepetitionAndClasses) {
  auto g = must(InputKind::kRegex, "[A-Z][a-z]{2,4}-\\d{3}");
  EXPECT_TRUE(accepts(g, "Abc-123"));
  EXPECT_TRUE(accepts(g, "Abcde-000"));
  EXPECT_FALSE(accepts(g, "Ab-123"));
  EXPECT_FALSE(accepts(g, "Abcdef-123"));
  auto neg = must(InputKind::kRegex, "[^a]+");
  EXPECT_TRUE(accepts(neg, "bé\n"));
  EXPECT_FALSE(accepts(neg, "ba"));
  auto exact = must(InputKind::kRegex, "x{3}");
  EXPECT_TRUE(accepts(exact, "xxx"));
  EXPECT_FALSE(accepts(exact, "xx"));
}

TEST(GrammarRegex, UnicodeIsUtf8) {
  auto g = must(InputKind::kRegex, "[α-ω]+");
  EXPECT_TRUE(accepts(g, "αβω"));
  EXPECT_FALSE(accepts(g, "a"));
  Matcher m(g);
  EXPECT_TRUE(m.advance(0xCE));  // first byte of α
  EXPECT_FALSE(m.accepting());   // half a character is not a sentence
}

TEST(GrammarRegex, UnsupportedConstructsAreErrors) {
  for (const char* re : {"(a)\\1", "(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b", "\\bx", "\\p{L}", "(?i)a", "a++",
                         "[[:alpha:]]", "a|b^"}) {
    auto g = compile(InputKind::kRegex, re);
    EXPECT_FALSE(g.ok()) << re;
  }
  auto g = compile(InputKind::kRegex, "(a)\\1");
  EXPECT_NE(g.message().find("backreference"), std::string::npos) << g.message();
  EXPECT_FALSE(compile(InputKind::kRegex, "(ab").ok());
  EXPECT_FALSE(compile(InputKind::kRegex, "*a").ok());
  EXPECT_FALSE(compile(InputKind::kRegex, "a{3,1}").ok());
}

TEST(GrammarChoice, OneOfTheStrings) {
  auto g = must(InputKind::kChoice, R"(["yes","no","maybe so"])");
  EXPECT_TRUE(accepts(g, "yes"));
  EXPECT_TRUE(accepts(g, "maybe so"));
  EXPECT_FALSE(accepts(g, "ye"));
  EXPECT_FALSE(accepts(g, "yess"));
  EXPECT_FALSE(compile(InputKind::kChoice, "[]").ok());
  EXPECT_FALSE(compile(InputKind::kChoice, "[1]").ok());
}

TEST(GrammarGbnf, LlamaCppJsonLikeGrammar) {
  const char* gbnf = R"G(
# arithmetic, llama.cpp style
root  ::= expr
expr  ::= term ("+" term)*
term  ::= num | "(" ws expr ws ")"
num   ::= [0-9]+
ws    ::= [ \t\n]*
)G";
  auto g = must(InputKind::kGbnf, gbnf);
  EXPECT_TRUE(accepts(g, "1+2"));
  EXPECT_TRUE(accepts(g, "( 1+2 )+30"));
  EXPECT_FALSE(accepts(g, "1+"));
  EXPECT_FALSE(accepts(g, "(1"));
}

TEST(GrammarGbnf, LeftRecursionRepetitionAndEscapes) {
  auto g = must(InputKind::kGbnf,
                "root ::= list \"\\n\"\nlist ::= list \",\" item | item\nitem ::= [a-c]{1,2} | \"\\x41\"");
  EXPECT_TRUE(accepts(g, "a,bc,A\n"));
  EXPECT_FALSE(accepts(g, "abc\n"));
  auto dot = must(InputKind::kGbnf, "root ::= \"<\" [^>]* \">\" .");
  EXPECT_TRUE(accepts(dot, "<ab>é"));
}

TEST(GrammarGbnf, Errors) {
  EXPECT_FALSE(compile(InputKind::kGbnf, "start ::= \"a\"").ok());    // no root
  EXPECT_FALSE(compile(InputKind::kGbnf, "root ::= missing").ok());   // undefined rule
  EXPECT_FALSE(compile(InputKind::kGbnf, "root ::= \"a").ok());       // unterminated
  EXPECT_FALSE(compile(InputKind::kGbnf, "root ::= <[1000]>").ok());  // token references
  auto e = compile(InputKind::kGbnf, "root ::= x\nx ::= x");          // derives no string
  EXPECT_FALSE(e.ok());
}

TEST(GrammarMatcher, RollbackCopyAllowed) {
  auto g = must(InputKind::kRegex, "abc|abd");
  Matcher m(g);
  EXPECT_EQ(m.advance_bytes("ab"), 2u);
  ByteSet next = m.allowed();
  EXPECT_TRUE(next.test('c'));
  EXPECT_TRUE(next.test('d'));
  EXPECT_EQ(next.count(), 2u);
  Matcher copy = m;
  EXPECT_TRUE(m.advance('c'));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.advance('c'));  // refused: state unchanged
  EXPECT_EQ(m.position(), 3u);
  m.rollback(1);
  EXPECT_TRUE(m.advance('d'));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(copy.accepting());
  EXPECT_TRUE(copy.advance('c'));
  m.rollback(3);
  EXPECT_EQ(m.position(), 0u);
  EXPECT_EQ(m.advance_bytes("abd"), 3u);
}

TEST(GrammarLimits, HugeSchemaFailsFast) {
  // ~1.2 MB of schema: over the input limit.
  std::string big = R"({"enum":[)";
  while (big.size() < 1'200'000) big += "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",";
  big += "\"b\"]}";
  auto t0 = std::chrono::steady_clock::now();
  auto g = compile(InputKind::kJsonSchema, big);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(g.ok());
  EXPECT_LT(s, 1.0);
}

TEST(GrammarLimits, NearLimitSchemaWithinOneSecond) {
  // Just under 1 MB, many properties: compiles or fails, but within the time budget.
  std::string s = R"({"type":"object","properties":{)";
  for (int i = 0; s.size() < 1'000'000; ++i)
    s += "\"p" + std::to_string(i) + "\":{\"type\":\"integer\",\"minimum\":3},";
  s += R"("last":{"type":"string"}}})";
  auto t0 = std::chrono::steady_clock::now();
  auto g = compile(InputKind::kJsonSchema, s);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.5) << (g.ok() ? "ok" : g.message());
}

TEST(GrammarLimits, DeepNestingIsAnError) {
  std::string deep;
  for (int i = 0; i < 30000; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 30000; ++i) deep += "}";
  auto g = compile(InputKind::kJsonSchema, deep);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("deep"), std::string::npos) << g.message();
  std::string re(5000, '(');
  re += "a" + std::string(5000, ')');
  EXPECT_FALSE(compile(InputKind::kRegex, re).ok());
  std::string gb = "root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')');
  EXPECT_FALSE(compile(InputKind::kGbnf, gb).ok());
}

TEST(GrammarLimits, RecursiveRefWithoutBaseIsUnsatisfiable) {
  auto g = compile(
      InputKind::kJsonSchema,
      R"({"$defs":{"a":{"type":"array","items":{"$ref":"#/$defs/a"},"minItems":1}},"$ref":"#/$defs/a"})");
  EXPECT_FALSE(g.ok());
  auto self = compile(InputKind::kJsonSchema, R"({"$ref":"#"})");
  EXPECT_FALSE(self.ok());
}

TEST(GrammarLimits, AllOfRefCycleTerminates) {
  auto g = compile(InputKind::kJsonSchema,
                   R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})");
  EXPECT_FALSE(g.ok());
}

}  // namespace
}  // namespace gridq::grammar

// The forced tool-call grammar (grammar/tool_call.h): the poolside_v1 syntax with arguments valid for each
// tool's parameters, raw string arguments as the parser keeps them, parallel and named choices, and errors
// that name the tool and the keyword. Accepted texts are read back by the real poolside parser.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "grammar/tool_call.h"
#include "text/tool_parser_json.h"
#include "text/tool_parser_poolside.h"

namespace gridq::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
     "city":{"type":"string","minLength":1,"maxLength":10},
     "unit":{"type":"string","enum":["c","f"]},
     "days":{"type":"integer","minimum":1,"maximum":7},
     "opts":{"type":"object","properties":{"wind":{"type":"boolean"}},"required":["wind"]}},
   "required":["city"]}}},
  {"type":"function","function":{"name":"noop"}}])");

std::string call(const std::string& body) {
  return std::string(kToolCallOpen) + body + std::string(kToolCallClose);
}
std::string arg(const std::string& k, const std::string& v) {
  return "<arg_key>" + k + "</arg_key><arg_value>" + v + "</arg_value>";
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance_bytes(text) == text.size() && m.accepting();
}

std::shared_ptr<const Grammar> must(const std::string& only, bool parallel) {
  auto g = compile_poolside_tool_calls(kTools, only, parallel);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

TEST(ToolCallGrammar, ArgumentsFollowTheSchemas) {
  auto g = must("", false);
  const std::string ok1 = call("get_weather" + arg("city", "Paris"));
  const std::string ok2 = call("get_weather" + arg("city", "São Paulo") + arg("unit", "c") +
                               arg("days", "3") + arg("opts", R"({"wind":true})"));
  EXPECT_TRUE(accepts(g, ok1));
  EXPECT_TRUE(accepts(g, ok2));
  EXPECT_TRUE(accepts(g, call("noop")));
  EXPECT_FALSE(accepts(g, call("get_weather")));                                  // city is required
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("city", "a<b"))));             // '<' in a raw string
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("city", "Constantinople"))));  // over maxLength
  EXPECT_TRUE(accepts(g, call("get_weather" + arg("city", "\"Paris\""))));        // quotes are raw text here
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("city", "P") + arg("unit", "k"))));  // not in the enum
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("city", "P") + arg("days", "8"))));  // above maximum
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("days", "2") + arg("city", "P"))));  // schema order
  EXPECT_FALSE(accepts(g, call("get_weather" + arg("city", "P") + arg("x", "1"))));     // undeclared
  EXPECT_FALSE(accepts(g, call("other")));
  EXPECT_FALSE(accepts(g, ok1 + ok1));  // not parallel: one call
  EXPECT_FALSE(accepts(g, "<tool_call>get_weather" + arg("city", "P") + "</tool_call>"));  // text markers

  // The real parser reads the accepted text (markers as the tokens' text) into arguments matching the schema.
  std::string text = ok2;
  text.replace(text.find(kToolCallOpen), kToolCallOpen.size(), "<tool_call>");
  text.replace(text.find(kToolCallClose), kToolCallClose.size(), "</tool_call>");
  auto parsed = text::parse_poolside_tool_calls(
      text, text::tool_schemas_from_openai(nlohmann::json::parse(kTools.dump())));
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(parsed.calls[0].arguments),
            nlohmann::json::parse(R"({"city":"São Paulo","unit":"c","days":3,"opts":{"wind":true}})"));
}

TEST(ToolCallGrammar, ParallelAndNamed) {
  auto par = must("", true);
  const std::string a = call("get_weather" + arg("city", "Rome")), b = call("noop");
  EXPECT_TRUE(accepts(par, a + b + a));
  EXPECT_FALSE(accepts(par, ""));
  auto named = must("noop", false);
  EXPECT_TRUE(accepts(named, b));
  EXPECT_FALSE(accepts(named, a));
  EXPECT_FALSE(compile_poolside_tool_calls(kTools, "missing", false).ok());
}

// The JSON (hermes) syntax: compact JSON arguments valid for the parameters schema, read back by the real
// JSON tool parser.
TEST(ToolCallGrammar, JsonSyntax) {
  auto g = compile_json_tool_calls(kTools, "", false);
  ASSERT_TRUE(g.ok()) << g.message();
  auto j = [](const std::string& obj) { return call("\n" + obj + "\n"); };
  const std::string ok = j(R"({"name":"get_weather","arguments":{"city":"Rome","days":2}})");
  EXPECT_TRUE(accepts(*g, ok));
  EXPECT_TRUE(accepts(*g, j(R"({"name":"noop","arguments":{}})")));
  EXPECT_TRUE(
      accepts(*g, j(R"({"name":"noop","arguments":{"anything":[1]}})")));  // no parameters: any object
  EXPECT_FALSE(accepts(*g, j(R"({"name":"get_weather","arguments":{"days":2}})")));  // city required
  EXPECT_FALSE(accepts(*g, j(R"({"name":"get_weather","arguments":{"city":"Rome","days":9}})")));
  EXPECT_FALSE(accepts(*g, j(R"({"name":"other","arguments":{}})")));
  EXPECT_FALSE(accepts(*g, ok + ok));
  auto par = compile_json_tool_calls(kTools, "noop", true);
  ASSERT_TRUE(par.ok());
  EXPECT_TRUE(accepts(*par, j(R"({"name":"noop","arguments":{}})") + j(R"({"name":"noop","arguments":{}})")));
  EXPECT_FALSE(accepts(*par, ok));
  std::string text = ok;
  text.replace(text.find(kToolCallOpen), kToolCallOpen.size(), "<tool_call>");
  text.replace(text.find(kToolCallClose), kToolCallClose.size(), "</tool_call>");
  auto parsed = text::parse_json_tool_calls(text);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(parsed.calls[0].arguments),
            nlohmann::json::parse(R"({"city":"Rome","days":2})"));
}

TEST(ToolCallGrammar, UnsupportedKeywordsNameToolAndKeyword) {
  auto bad = [](const char* params) {
    ojson t = ojson::array();
    t.push_back(ojson::parse(std::string(R"({"type":"function","function":{"name":"f","parameters":)") +
                             params + "}}"));
    auto g = compile_poolside_tool_calls(t, "", false);
    EXPECT_FALSE(g.ok()) << params;
    return g.ok() ? std::string() : g.message();
  };
  std::string m = bad(R"({"type":"object","oneOf":[{}]})");
  EXPECT_NE(m.find("tool 'f'"), std::string::npos) << m;
  EXPECT_NE(m.find("oneOf"), std::string::npos) << m;
  m = bad(R"({"type":"object","properties":{"s":{"type":"string","multipleOf":{}}}})");
  EXPECT_NE(m.find("multipleOf"), std::string::npos) << m;
  m = bad(R"({"type":"object","properties":{"n":{"type":"integer","not":{}}}})");
  EXPECT_NE(m.find("argument 'n'"), std::string::npos) << m;
  m = bad(R"({"type":"object","required":["ghost"]})");
  EXPECT_NE(m.find("ghost"), std::string::npos) << m;
  m = bad(R"({"type":"array"})");
  EXPECT_NE(m.find("object"), std::string::npos) << m;
}

}  // namespace
}  // namespace gridq::grammar

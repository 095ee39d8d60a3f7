// Tool calls to undeclared functions (issue 14 item 3): a parsed call whose name the request did not declare,
// or whose name holds the format's marker text, is not a call. Before the first real block it stays in
// content verbatim (vLLM keeps such output as content); after a real call it is dropped like any text
// there. Both parsers, streaming equal to non-streaming at every split.
#include <gtest/gtest.h>

#include "text/tool_parser_json.h"
#include "text/tool_parser_poolside.h"

namespace gridq::text {
namespace {

ToolSchemas declared() {
  auto tools = nlohmann::json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"type":"string"}}}}}])");
  return tool_schemas_from_openai(tools);
}

struct Out {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

Out stream(ToolStreamParser& p, const std::vector<std::string>& pieces) {
  Out o;
  auto take = [&](const ToolStreamDelta& d) {
    o.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) o.calls.push_back({c.name, ""});
      if (!o.calls.empty()) o.calls.back().arguments += c.arguments;
    }
  };
  for (const auto& s : pieces) take(p.feed(s));
  take(p.finish());
  return o;
}

void expect_stream_equal(const std::string& text, const ToolParseResult& ns,
                         const std::function<std::unique_ptr<ToolStreamParser>()>& make) {
  std::vector<std::vector<std::string>> splits = {{text}};
  for (size_t cut = 0; cut <= text.size(); ++cut) splits.push_back({text.substr(0, cut), text.substr(cut)});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  splits.push_back(bytes);
  for (size_t k = 0; k < splits.size(); ++k) {
    auto p = make();
    Out o = stream(*p, splits[k]);
    EXPECT_EQ(o.content, ns.content.value_or("")) << "split " << k;
    ASSERT_EQ(o.calls.size(), ns.calls.size()) << "split " << k;
    for (size_t i = 0; i < o.calls.size(); ++i) {
      EXPECT_EQ(o.calls[i].name, ns.calls[i].name) << "split " << k;
      EXPECT_EQ(o.calls[i].arguments, ns.calls[i].arguments) << "split " << k;
    }
  }
}

struct Case {
  const char* label;
  std::string text;
  std::optional<std::string> content;
  std::vector<std::string> names;
};

TEST(ToolCallNames, PoolsideUndeclaredNamesStayContent) {
  const std::string ok =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>";
  const std::vector<Case> cases = {
      {"undeclared name",
       "<tool_call>_<arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",
       "<tool_call>_<arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",
       {}},
      {"marker text as the name",
       "<tool_call><tool_call><tool_call>\n<arg_key>a</arg_key></tool_call>",
       "<tool_call><tool_call><tool_call>\n<arg_key>a</arg_key></tool_call>",
       {}},
      {"undeclared before a real call stays content",
       "A<tool_call>nope</tool_call>B" + ok,
       "A<tool_call>nope</tool_call>B",
       {"get_weather"}},
      {"undeclared after a real call is dropped",
       ok + "<tool_call>nope</tool_call>",
       std::nullopt,
       {"get_weather"}},
      {"unterminated undeclared block", "x<tool_call>_<arg_key>c", "x<tool_call>_<arg_key>c", {}},
      {"declared call still parses", ok, std::nullopt, {"get_weather"}},
  };
  const ToolSchemas s = declared();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto r = parse_poolside_tool_calls(c.text, s);
    EXPECT_EQ(r.content, c.content);
    ASSERT_EQ(r.calls.size(), c.names.size());
    for (size_t i = 0; i < c.names.size(); ++i) EXPECT_EQ(r.calls[i].name, c.names[i]);
    expect_stream_equal(c.text, r, [&] { return make_poolside_stream_parser(s); });
  }
}

TEST(ToolCallNames, JsonUndeclaredNamesStayContent) {
  const std::string ok =
      "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>";
  const std::string bad = "<tool_call>{\"name\":\"_\",\"arguments\":{}}</tool_call>";
  const std::string marker = "<tool_call>{\"name\":\"<tool_call>\",\"arguments\":{}}</tool_call>";
  const std::vector<Case> cases = {
      {"undeclared name", bad, bad, {}},
      {"marker text as the name", marker, marker, {}},
      {"undeclared beside a real call", bad + ok, bad, {"get_weather"}},
  };
  const ToolSchemas s = declared();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto r = parse_json_tool_calls(c.text, s);
    EXPECT_EQ(r.content, c.content);
    ASSERT_EQ(r.calls.size(), c.names.size());
    for (size_t i = 0; i < c.names.size(); ++i) EXPECT_EQ(r.calls[i].name, c.names[i]);
    expect_stream_equal(c.text, r, [&] { return make_json_stream_parser(s); });
  }
}

TEST(ToolCallNames, WithoutDeclaredToolsOnlyMarkerNamesAreRefused) {
  const ToolSchemas open;  // no `tools` given: the parser is not restricted to names
  EXPECT_TRUE(open.accepts("anything"));
  EXPECT_FALSE(open.accepts("a<tool_call>"));
  const ToolSchemas s = declared();
  EXPECT_TRUE(s.accepts("get_weather"));
  EXPECT_FALSE(s.accepts("get_weather2"));
  EXPECT_FALSE(s.accepts("_"));
}

}  // namespace
}  // namespace gridq::text

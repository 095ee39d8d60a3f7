// Tool-call parsers (api.md §5): every case the spec lists, checked non-streaming against expectations
// derived by hand from the spec's rules, and streaming against non-streaming for every two-way split at each
// byte boundary, every one-byte-at-a-time split, and 100 seeded random multi-way splits ([V-tests]).
#include <gtest/gtest.h>

#include <random>

#include "text/tool_parser_json.h"
#include "text/tool_parser_poolside.h"

namespace gridq::text {
namespace {

struct Agg {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Feeds `pieces` and checks the streaming invariants of api.md §4.5 while accumulating.
Agg run_stream(ToolStreamParser& p, const std::vector<std::string>& pieces) {
  Agg a;
  auto take = [&](const ToolStreamDelta& d) {
    a.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first) {
        EXPECT_EQ(c.index, static_cast<int>(a.calls.size())) << "indexes increase in order of appearance";
        EXPECT_FALSE(c.name.empty());
        a.calls.push_back({c.name, c.arguments});
      } else {
        EXPECT_TRUE(c.name.empty());
        EXPECT_LT(c.index, static_cast<int>(a.calls.size()));
        if (c.index < static_cast<int>(a.calls.size())) a.calls[c.index].arguments += c.arguments;
      }
    }
  };
  for (const auto& s : pieces) take(p.feed(s));
  take(p.finish());
  return a;
}

using Factory = std::function<std::unique_ptr<ToolStreamParser>()>;

void expect_same(const ToolParseResult& ns, const Agg& st, const std::string& what) {
  EXPECT_EQ(ns.content.value_or(""), st.content) << what;
  ASSERT_EQ(ns.calls.size(), st.calls.size()) << what;
  for (size_t i = 0; i < ns.calls.size(); ++i) {
    EXPECT_EQ(ns.calls[i].name, st.calls[i].name) << what;
    EXPECT_EQ(ns.calls[i].arguments, st.calls[i].arguments) << what;
  }
}

void check_split_invariance(const std::string& text, const ToolParseResult& ns, const Factory& make) {
  {
    auto p = make();
    expect_same(ns, run_stream(*p, {text}), "whole");
  }
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto p = make();
    expect_same(ns, run_stream(*p, {text.substr(0, cut), text.substr(cut)}), "cut at " + std::to_string(cut));
  }
  {
    std::vector<std::string> bytes;
    for (char c : text) bytes.emplace_back(1, c);
    auto p = make();
    expect_same(ns, run_stream(*p, bytes), "byte by byte");
  }
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<std::string> pieces;
    size_t i = 0;
    while (i < text.size()) {
      size_t n = std::uniform_int_distribution<size_t>(1, 7)(rng);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    auto p = make();
    expect_same(ns, run_stream(*p, pieces), "random split " + std::to_string(trial));
  }
}

ToolSchemas weather_schemas() {
  auto tools = nlohmann::json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
      "city":{"type":"string"},"days":{"type":"integer"},"metric":{"type":"boolean"},
      "opts":{"type":"object"},"note":{"type":["string","null"]}}}}},
    {"type":"function","function":{"name":"write_file","parameters":{"type":"object","properties":{
      "path":{"type":"string"},"content":{"type":"string"}}}}},
    {"type":"function","function":{"name":"ping"}},
    {"type":"function","function":{"name":"other","parameters":{"type":"object"}}}])");
  return tool_schemas_from_openai(tools);
}

struct PoolCase {
  const char* label;
  std::string text;
  std::optional<std::string> content;
  std::vector<ParsedToolCall> calls;
  bool stream_equal = true;  // false only for the documented unterminated-block divergence
};

std::vector<PoolCase> poolside_cases() {
  return {
      {"no call", "Hello world", "Hello world", {}},
      {"empty output", "", std::nullopt, {}},
      {"whitespace only, no call", " \n", " \n", {}},
      {"S-2.1 single call, no newline after name",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Paris"})"}}},
      {"older release: NAME\\n and newline after each pair",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</"
       "arg_key>\n"
       "<arg_value>3</arg_value>\n</tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Paris", "days": 3})"}}},
      {"content before call kept, after dropped",
       "Let me "
       "check.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>trailing",
       "Let me check.\n",
       {{"get_weather", R"({"city": "Oslo"})"}}},
      {"whitespace-only content before a call becomes null",
       "\n\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Oslo"})"}}},
      {"two calls in a row, text between dropped",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value></tool_call>\nand\n"
       "<tool_call>write_file<arg_key>path</arg_key><arg_value>x.py</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "A"})"}, {"write_file", R"({"path": "x.py"})"}}},
      {"no pairs gives {}", "<tool_call>ping</tool_call>", std::nullopt, {{"ping", "{}"}}},
      {"string-typed value kept byte for byte (code)",
       "<tool_call>write_file<arg_key>path</arg_key><arg_value> a.py </arg_value><arg_key>content</arg_key>"
       "<arg_value>def f():\n\treturn \"x\\n\"  \n</arg_value></tool_call>",
       std::nullopt,
       {{"write_file", R"({"path": " a.py ", "content": "def f():\n\treturn \"x\\n\"  \n"})"}}},
      {"typed values: JSON, Python literal, raw",
       "<tool_call>get_weather<arg_key>days</arg_key><arg_value> 5 </arg_value><arg_key>metric</arg_key>"
       "<arg_value>True</arg_value><arg_key>opts</arg_key><arg_value>{'a': None, 'b': [1, 2.5]}</arg_value>"
       "<arg_key>city</arg_key><arg_value>7</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"days": 5, "metric": true, "opts": {"a": null, "b": [1, 2.5]}, "city": "7"})"}}},
      {"tool without property types parsed untyped",
       "<tool_call>other<arg_key>x</arg_key><arg_value>[1,2]</arg_value><arg_key>y</arg_key><arg_value>hello "
       "there</arg_value><arg_key>z</arg_key><arg_value>\"q\"</arg_value></tool_call>",
       std::nullopt,
       {{"other", R"({"x": [1, 2], "y": "hello there", "z": "q"})"}}},
      {"unknown key on known tool parsed untyped; nullable string kept raw",
       "<tool_call>get_weather<arg_key>extra</arg_key><arg_value>false</arg_value><arg_key>note</arg_key>"
       "<arg_value>null</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"extra": false, "note": "null"})"}}},
      {"duplicate keys keep the first",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value><arg_key>city</arg_key>"
       "<arg_value>B</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "A"})"}}},
      {"non-ASCII not escaped",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich 東京</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", "{\"city\": \"Zürich 東京\"}"}}},
      {"empty name dropped",
       "pre<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
       "pre",
       {}},
      {"whitespace between key and value",
       "<tool_call>get_weather<arg_key> city </arg_key> \n <arg_value>Rome</arg_value></tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Rome"})"}}},
      {"key not followed by value is skipped",
       "<tool_call>get_weather<arg_key>bad</arg_key>junk<arg_key>city</arg_key><arg_value>Rome</arg_value>"
       "</tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Rome"})"}}},
      {"unclosed value runs to </tool_call>",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Rome"})"}}},
      {"lookalike tag text inside a string value",
       "<tool_call>write_file<arg_key>content</arg_key><arg_value>a </arg_val <tool_call b</arg_value>"
       "</tool_call>",
       std::nullopt,
       {{"write_file", R"({"content": "a </arg_val <tool_call b"})"}}},
      {"partial open tag in content is just text", "x < y and <tool_ca", "x < y and <tool_ca", {}},
      {"unterminated block: whole text as content",
       "Hi<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",
       "Hi<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par",
       {},
       false},
  };
}

TEST(PoolsideToolParser, SpecCasesNonStreaming) {
  auto schemas = weather_schemas();
  for (const auto& c : poolside_cases()) {
    auto r = parse_poolside_tool_calls(c.text, schemas);
    EXPECT_EQ(r.content, c.content) << c.label;
    ASSERT_EQ(r.calls.size(), c.calls.size()) << c.label;
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, c.calls[i].name) << c.label;
      EXPECT_EQ(r.calls[i].arguments, c.calls[i].arguments) << c.label;
      auto j = nlohmann::json::parse(r.calls[i].arguments, nullptr, false);
      EXPECT_TRUE(j.is_object()) << c.label << ": arguments parse as a JSON object";
    }
  }
}

TEST(PoolsideToolParser, StreamingEqualsNonStreamingAtEverySplit) {
  auto schemas = weather_schemas();
  for (const auto& c : poolside_cases()) {
    if (!c.stream_equal) continue;
    SCOPED_TRACE(c.label);
    auto ns = parse_poolside_tool_calls(c.text, schemas);
    check_split_invariance(c.text, ns, [&] { return make_poolside_stream_parser(schemas); });
  }
}

TEST(PoolsideToolParser, UnterminatedStreamClosesArguments) {
  auto schemas = weather_schemas();
  auto p = make_poolside_stream_parser(schemas);
  auto a = run_stream(*p, {"Hi<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par"});
  EXPECT_EQ(a.content, "Hi");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, R"({"city": "Par"})");
}

TEST(PoolsideToolParser, StringValueStreamsIncrementally) {
  auto schemas = weather_schemas();
  auto p = make_poolside_stream_parser(schemas);
  auto d1 = p->feed("<tool_call>write_file<arg_key>content</arg_key><arg_value>line one\n");
  ASSERT_EQ(d1.calls.size(), 2u);
  EXPECT_TRUE(d1.calls[0].first);
  EXPECT_EQ(d1.calls[0].name, "write_file");
  EXPECT_EQ(d1.calls[1].arguments, "{\"content\": \"line one\\n");
  auto d2 = p->feed("two</arg_v");  // partial closing tag held back
  ASSERT_EQ(d2.calls.size(), 1u);
  EXPECT_EQ(d2.calls[0].arguments, "two");
  auto d3 = p->feed("alue></tool_call>");
  ASSERT_EQ(d3.calls.size(), 1u);
  EXPECT_EQ(d3.calls[0].arguments, "\"}");
}

TEST(PoolsideToolParser, NeverThrowsOnGarbage) {
  auto schemas = weather_schemas();
  std::mt19937 rng(7);
  const std::vector<std::string> atoms = {"<tool_call>", "</tool_call>",
                                          "<arg_key>",   "</arg_key>",
                                          "<arg_value>", "</arg_value>",
                                          "a",           " ",
                                          "\n",          "{",
                                          "'",           "\"",
                                          "1",           "<",
                                          ">",           "/"};
  for (int t = 0; t < 300; ++t) {
    std::string s;
    int n = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    auto r = parse_poolside_tool_calls(s, schemas);
    for (const auto& c : r.calls)
      EXPECT_TRUE(nlohmann::json::parse(c.arguments, nullptr, false).is_object()) << s;
    auto p = make_poolside_stream_parser(schemas);
    auto a = run_stream(*p, {s});
    for (const auto& c : a.calls)
      EXPECT_TRUE(nlohmann::json::parse(c.arguments, nullptr, false).is_object()) << s;
    // Terminated outputs (every <tool_call> closed) must agree exactly.
    size_t open = 0, pos = 0;
    bool terminated = true;
    while ((pos = s.find("<tool_call>", open)) != std::string::npos) {
      size_t e = s.find("</tool_call>", pos + 11);
      if (e == std::string::npos) {
        terminated = false;
        break;
      }
      open = e + 12;
    }
    if (terminated) expect_same(r, a, s);
  }
}

TEST(ToolCallFilter, NamedAndParallel) {
  auto schemas = weather_schemas();
  std::string text =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value></tool_call>"
      "<tool_call>write_file<arg_key>path</arg_key><arg_value>p</arg_value></tool_call>"
      "<tool_call>write_file<arg_key>path</arg_key><arg_value>q</arg_value></tool_call>";
  auto ns = parse_poolside_tool_calls(text, schemas);
  ToolCallFilter named{std::string("write_file"), true};
  auto r = apply_filter(ns, named);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments, R"({"path": "p"})");
  check_split_invariance(text, r, [&] { return filtered(make_poolside_stream_parser(schemas), named); });
  ToolCallFilter single{std::nullopt, false};
  auto r2 = apply_filter(ns, single);
  ASSERT_EQ(r2.calls.size(), 1u);
  EXPECT_EQ(r2.calls[0].name, "get_weather");
  check_split_invariance(text, r2, [&] { return filtered(make_poolside_stream_parser(schemas), single); });
}

TEST(PythonLiteral, Cases) {
  EXPECT_EQ(dump_json_py(*parse_python_literal("None")), "null");
  EXPECT_EQ(dump_json_py(*parse_python_literal("(1, 'a\\'b', True,)")), R"([1, "a'b", true])");
  EXPECT_EQ(dump_json_py(*parse_python_literal("{'k': {\"n\": -.5}}")), R"({"k": {"n": -0.5}})");
  EXPECT_FALSE(parse_python_literal("hello").has_value());
  EXPECT_FALSE(parse_python_literal("[1, 2").has_value());
  EXPECT_FALSE(parse_python_literal(std::string(200, '[')).has_value());
}

struct JsonCase {
  const char* label;
  std::string text;
  std::optional<std::string> content;
  std::vector<ParsedToolCall> calls;
};

TEST(JsonToolParser, SpecCasesAndSplits) {
  std::vector<JsonCase> cases = {
      {"no call", "plain text", "plain text", {}},
      {"empty", "", std::nullopt, {}},
      {"one call",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": "
       "2}}\n</tool_call>",
       std::nullopt,
       {{"get_weather", R"({"city": "Paris", "days": 2})"}}},
      {"parameters synonym, key order kept",
       "Sure. <tool_call>{\"name\":\"f\",\"parameters\":{\"z\":1,\"a\":{\"b\":[true,null]}}}</tool_call>",
       "Sure. ",
       {{"f", R"({"z": 1, "a": {"b": [true, null]}})"}}},
      {"two calls with text between kept as content",
       "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call> mid "
       "<tool_call>{\"name\":\"b\",\"arguments\":{}}"
       "</tool_call>\n",
       " mid \n",
       {{"a", "{}"}, {"b", "{}"}}},
      {"whitespace-only content with calls is null",
       "\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n",
       std::nullopt,
       {{"a", "{}"}}},
      {"invalid JSON left in content",
       "x<tool_call>{not json}</tool_call>y",
       "x<tool_call>{not json}</tool_call>y",
       {}},
      {"arguments not an object left in content",
       "<tool_call>{\"name\":\"a\",\"arguments\":\"{}\"}</tool_call>",
       "<tool_call>{\"name\":\"a\",\"arguments\":\"{}\"}</tool_call>",
       {}},
      {"missing name left in content",
       "<tool_call>{\"arguments\":{}}</tool_call>",
       "<tool_call>{\"arguments\":{}}</tool_call>",
       {}},
      {"unterminated left in content", "a<tool_call>{\"name\":\"a\"", "a<tool_call>{\"name\":\"a\"", {}},
      {"non-ASCII",
       "<tool_call>{\"name\":\"t\",\"arguments\":{\"s\":\"h\\u00e9 東\"}}</tool_call>",
       std::nullopt,
       {{"t", "{\"s\": \"hé 東\"}"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto r = parse_json_tool_calls(c.text);
    EXPECT_EQ(r.content, c.content);
    ASSERT_EQ(r.calls.size(), c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, c.calls[i].name);
      EXPECT_EQ(r.calls[i].arguments, c.calls[i].arguments);
    }
    check_split_invariance(c.text, r, [] { return make_json_stream_parser(); });
  }
}

}  // namespace
}  // namespace gridq::text

namespace gridq::text {
namespace {
// Python number spellings JSON lacks ("1.", ".5", "-.5", "1_000", "+2"): the normalisation that is written
// into a fresh string (GCC 12's -O3 -Wrestrict false positive on in-place inserts) keeps every value.
TEST(PythonLiteral, NumberSpellings) {
  const std::pair<const char*, double> cases[] = {{"1.", 1.0},   {".5", 0.5},     {"-.5", -0.5},
                                                  {"-1.", -1.0}, {"1_000", 1000}, {"+2", 2.0}};
  for (const auto& [text, want] : cases) {
    auto v = parse_python_literal(text);
    ASSERT_TRUE(v && v->is_number()) << text;
    EXPECT_DOUBLE_EQ(v->get<double>(), want) << text;
  }
  for (const char* bad : {"-", "+", "-_"})
    EXPECT_FALSE(parse_python_literal(bad) && parse_python_literal(bad)->is_number()) << bad;
}
}  // namespace
}  // namespace gridq::text

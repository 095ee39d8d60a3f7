// The per-choice output pipeline with the bundled model's real tokenizer: streamed deltas concatenate to the
// non-streamed result for reasoning, tool calls and stop strings; markers never leak; stop strings match
// across token boundaries (reference: search in the fully decoded text).
#include <gtest/gtest.h>

#include "serve/output_processor.h"

namespace gridq::serve {
namespace {

const text::Tokenizer& tok() {
  static text::Tokenizer t = [] {
    auto r =
        text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.message();
    return std::move(*r);
  }();
  return t;
}

OutputSpec chat_spec(bool streaming, text::ReasoningMode initial) {
  OutputSpec s;
  s.tok = &tok();
  s.reasoning = true;
  s.markers = {tok().token_id("<think>"), tok().token_id("</think>"), tok().token_id("<assistant>")};
  s.initial = initial;
  s.keep_text_ids = {tok().token_id("<tool_call>"), tok().token_id("</tool_call>")};
  s.tools = ToolParserKind::kPoolside;
  s.schemas = text::tool_schemas_from_openai(nlohmann::json::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"properties":{"city":{"type":"string"}}}}}])"));
  s.streaming = streaming;
  return s;
}

struct Streamed {
  std::string reasoning, content;
  std::vector<text::ParsedToolCall> calls;
  bool stopped = false;
};

Streamed run_stream(OutputSpec spec, const std::vector<int32_t>& ids) {
  OutputProcessor p(spec);
  Streamed s;
  auto take = [&](const OutputDelta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const auto& c : d.calls) {
      if (c.first)
        s.calls.push_back({c.name, c.arguments});
      else
        s.calls[c.index].arguments += c.arguments;
    }
  };
  for (int32_t id : ids) {
    bool stop = false;
    take(p.push(id, stop));
    if (stop) {
      s.stopped = true;
      break;
    }
  }
  take(p.finish());
  return s;
}

TEST(OutputProcessor, ReasoningAndToolCallStreamEqualsNonStream) {
  ASSERT_GT(tok().vocab_size(), 0u);
  const std::string out =
      "I should look it up.\n</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>São Paulo "
      "</arg_value></tool_call>";
  auto ids = tok().encode(out, false);
  for (auto mode : {text::ReasoningMode::kReasoning, text::ReasoningMode::kContent}) {
    auto st = run_stream(chat_spec(true, mode), ids);
    OutputProcessor ns(chat_spec(false, mode));
    for (int32_t id : ids) {
      bool stop = false;
      (void)ns.push(id, stop);
    }
    (void)ns.finish();
    auto r = ns.result();
    EXPECT_EQ(st.reasoning, r.reasoning.value_or(""));
    EXPECT_EQ(st.content, r.content.value_or(""));
    ASSERT_EQ(st.calls.size(), r.calls.size());
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"São Paulo \"}");
    EXPECT_EQ(st.calls[0].arguments, r.calls[0].arguments);
    EXPECT_EQ(st.content.find("</think>"), std::string::npos);
    EXPECT_EQ(st.reasoning.find("</think>"), std::string::npos);
    if (mode == text::ReasoningMode::kReasoning) {
      EXPECT_EQ(*r.reasoning, "I should look it up.\n");
      EXPECT_EQ(*r.content, "Sure.");
    } else {
      EXPECT_FALSE(r.reasoning.has_value());
      EXPECT_EQ(*r.content, "I should look it up.\nSure.");
    }
  }
}

// Issue 14 item 3 on the server's output path: a call to a function the request did not declare comes back
// as content, byte for byte, streamed or not, and no tool call reaches the client.
TEST(OutputProcessor, UndeclaredToolCallStaysContent) {
  const std::string out =
      "Ok.<tool_call>_<arg_key>city</arg_key><arg_value>x</arg_value></tool_call><tool_call><tool_call>"
      "<tool_call>\n</tool_call>";
  auto ids = tok().encode(out, false);
  auto st = run_stream(chat_spec(true, text::ReasoningMode::kContent), ids);
  OutputProcessor ns(chat_spec(false, text::ReasoningMode::kContent));
  for (int32_t id : ids) {
    bool stop = false;
    (void)ns.push(id, stop);
  }
  (void)ns.finish();
  auto r = ns.result();
  EXPECT_TRUE(r.calls.empty());
  EXPECT_TRUE(st.calls.empty());
  EXPECT_FALSE(ns.saw_tool_calls());
  EXPECT_EQ(r.content.value_or(""), out);
  EXPECT_EQ(st.content, out);
}

TEST(OutputProcessor, StopStringsAcrossTokenBoundaries) {
  const std::string text = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)\n";
  auto ids = tok().encode(text, false);
  ASSERT_GT(ids.size(), 5u);
  for (std::string stop : {"n <", "(n", "\n    ret", "else fib", "zzz"}) {
    for (bool include : {false, true}) {
      OutputSpec s;
      s.tok = &tok();
      s.stop = {stop};
      s.include_stop_str = include;
      s.streaming = true;
      auto st = run_stream(s, ids);
      // Reference: the decoded text cut at the first occurrence of the stop string.
      size_t p = text.find(stop);
      std::string want = p == std::string::npos ? text : text.substr(0, include ? p + stop.size() : p);
      EXPECT_EQ(st.content, want) << stop;
      EXPECT_EQ(st.stopped, p != std::string::npos) << stop;
    }
  }
}

TEST(OutputProcessor, Utf8NeverSplitAndSpecialsSkipped) {
  const std::string text = "é東京🙂 done";
  auto ids = tok().encode(text, false);
  std::vector<int32_t> with_pad = ids;
  with_pad.insert(with_pad.begin() + 1, tok().token_id("<|pad|>"));
  OutputSpec s;
  s.tok = &tok();
  s.streaming = true;
  OutputProcessor p(s);
  std::string all;
  for (int32_t id : with_pad) {
    bool stop = false;
    auto d = p.push(id, stop);
    // Every delta is valid UTF-8 on its own.
    auto check = d.content;
    size_t i = 0;
    while (i < check.size()) {
      unsigned char c = static_cast<unsigned char>(check[i]);
      size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      ASSERT_LE(i + len, check.size()) << "delta ends mid code point";
      i += len;
    }
    all += d.content;
  }
  all += p.finish().content;
  EXPECT_EQ(all, text);
}

}  // namespace
}  // namespace gridq::serve

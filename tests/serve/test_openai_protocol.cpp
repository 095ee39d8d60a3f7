// Request validation (api.md §2, §7, §11 T8/T10/T11/T12/T17/T18) and the error shape (§3); the context
// length and the chunk shapes are in test_openai_chunks.cpp. Expected statuses and params come from the
// spec's tables.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/sampling_limits.h"
#include "serve/openai_protocol.h"

namespace gridq::serve {
namespace {

const Limits kLim{4096, 4096};

ojson base_chat() { return ojson::parse(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"); }

std::optional<ApiError> chat_err(const ojson& b) {
  auto r = parse_chat_request(b, kLim);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  return std::nullopt;
}

TEST(Protocol, ErrorShape) {
  ApiError e = invalid("temperature", "bad");
  auto j = error_json(e);
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], "invalid_value");
  ApiError n;
  n.message = "x";
  EXPECT_TRUE(error_json(n)["error"]["param"].is_null());
  EXPECT_TRUE(error_json(n)["error"]["code"].is_null());
}

TEST(Protocol, BodyParsingRefusesBadJson) {
  for (std::string bad : std::vector<std::string>{"{", "{\"a\":1,\"a\":2}", "[1,", "nul",
                                                  "{\"a\":\"\\ud800\"}", std::string("{\"a\":\"\xff\"}"),
                                                  std::string(100000, '[') + std::string(100000, ']')}) {
    auto r = parse_body_json(bad);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad.substr(0, 40);
    EXPECT_EQ(std::get<ApiError>(r).status, 400);
  }
  // Non-object bodies parse as JSON but are refused by the request parsers.
  for (std::string s : std::vector<std::string>{"\"str\"", "[1]", "3", "null"}) {
    auto r = parse_body_json(s);
    ASSERT_TRUE(std::holds_alternative<ojson>(r));
    EXPECT_TRUE(chat_err(std::get<ojson>(r)).has_value()) << s;
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_completion_request(std::get<ojson>(r), kLim))) << s;
  }
  // Key order survives (tools render byte-exact).
  auto ok = parse_body_json(R"({"z":1,"a":2})");
  EXPECT_EQ(dump(std::get<ojson>(ok)), R"({"z":1,"a":2})");
}

TEST(Protocol, IntegerFieldsRejectBadValues) {
  // T8: -1, 0 where invalid, 2^31, 2^63, floats and strings (null means absent: NullableFieldsMeanDefault).
  const char* bad[] = {"-1", "2147483648", "9223372036854775808", "1.5", "2.0", "\"3\"", "true"};
  for (const char* field :
       {"max_tokens", "max_completion_tokens", "n", "top_logprobs", "min_tokens", "top_k"}) {
    for (const char* v : bad) {
      if (std::string(field) == "top_k" && std::string(v) == "-1") continue;  // -1 = off
      if (std::string(field) == "min_tokens" && std::string(v) == "-1") {
      }
      ojson b = base_chat();
      b["logprobs"] = true;
      b[field] = ojson::parse(v);
      auto e = chat_err(b);
      ASSERT_TRUE(e.has_value()) << field << "=" << v;
      EXPECT_EQ(e->status, 400);
      EXPECT_EQ(e->param, field) << v;
    }
  }
  for (const char* field : {"max_tokens", "n"}) {
    // 0 as it arrives on the wire: the JSON parser stores non-negative literals as unsigned, a different
    // path from a signed 0 built in C++ (which once hid `max_tokens: 0` being accepted).
    for (bool wire : {true, false}) {
      ojson b = base_chat();
      b[field] = wire ? ojson::parse("0") : ojson(0);
      ASSERT_EQ(b[field].is_number_unsigned(), wire);
      auto e = chat_err(b);
      ASSERT_TRUE(e.has_value()) << field << " wire=" << wire;
      EXPECT_EQ(e->param, field);
    }
  }
  ojson b = base_chat();
  b["seed"] = ojson::parse("9223372036854775808");
  EXPECT_EQ(chat_err(b)->param, "seed");
  b["seed"] = ojson::parse("-9223372036854775808");
  EXPECT_FALSE(chat_err(b).has_value());
}

TEST(Protocol, RangeAndCapChecks) {
  struct C {
    const char* json;
    const char* param;
  };
  const C cases[] = {
      {R"({"temperature":-0.5})", "temperature"},
      {R"({"temperature":2.5})", "temperature"},
      {R"({"top_p":-0.1})", "top_p"},
      {R"({"top_p":1.1})", "top_p"},
      {R"({"top_p":2.0})", "top_p"},
      {R"({"top_p":0})", "top_p"},
      {R"({"min_p":1.5})", "min_p"},
      {R"({"max_tokens":-10})", "max_tokens"},
      {R"({"n":17})", "n"},
      {R"({"presence_penalty":3})", "presence_penalty"},
      {R"({"frequency_penalty":-2.5})", "frequency_penalty"},
      {R"({"repetition_penalty":0})", "repetition_penalty"},
      {R"({"repetition_penalty":1e-50})", "repetition_penalty"},  // positive, but 0 in the sampler's fp32
      {R"({"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", "stop"},
      {R"({"stop":""})", "stop"},
      {R"({"stop":[""]})", "stop"},
      {R"({"stop":5})", "stop"},
      {R"({"stop_token_ids":[4096]})", "stop_token_ids"},
      {R"({"stop_token_ids":[-1]})", "stop_token_ids"},
      {R"({"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"({"top_logprobs":2})", "top_logprobs"},
      {R"({"logit_bias":{"4096":1}})", "logit_bias"},
      {R"({"logit_bias":{"abc":1}})", "logit_bias"},
      {R"({"logit_bias":{"5":101}})", "logit_bias"},
      {R"({"stream_options":{"include_usage":true}})", "stream_options"},
      {R"({"stream":true,"stream_options":{"include_usage":1}})", "stream_options"},
      {R"({"tools":[]})", "tools"},
      {R"({"tool_choice":"auto"})", "tool_choice"},
      {R"({"tool_choice":"sometimes","tools":[{"type":"function","function":{"name":"f"}}]})", "tool_choice"},
      {R"({"tool_choice":{"type":"function","function":{"name":"g"}},"tools":[{"type":"function","function":{"name":"f"}}]})",
       "tool_choice"},
      {R"({"tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {R"({"response_format":{"type":"yaml"}})", "response_format.type"},
      {R"({"response_format":{"type":"json_schema","json_schema":{}}})", "response_format.json_schema.name"},
      {R"({"reasoning_effort":"extreme"})", "reasoning_effort"},
      {R"({"chat_template_kwargs":{"messages":[]}})", "chat_template_kwargs"},
      {R"({"chat_template_kwargs":{"bos_token":"x"}})", "chat_template_kwargs"},
      {R"({"chat_template_kwargs":{"enable_thinking":"yes"}})", "chat_template_kwargs"},
      {R"({"add_generation_prompt":true,"continue_final_message":true})", "continue_final_message"},
      {R"({"model":5})", "model"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"[1]"}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":1}}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
      // Issue 14 item 11: a tool result must name its call; legacy function calling is refused by name.
      {R"({"messages":[{"role":"user","content":"x"},{"role":"tool","content":"42"}]})",
       "messages[1].tool_call_id"},
      {R"({"messages":[{"role":"tool","content":"42","tool_call_id":""}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"tool","content":"42","tool_call_id":7}]})", "messages[0].tool_call_id"},
      {R"({"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}}]})",
       "messages[0].function_call"},
      {R"({"messages":[{"role":"function","name":"f","content":"42"}]})", "messages[0].role"},
      {R"({"functions":[{"name":"f","parameters":{"type":"object"}}]})", "functions"},
      {R"({"function_call":"auto"})", "function_call"},
      {R"({"messages":null})", "messages"},
  };
  for (const auto& c : cases) {
    ojson b = base_chat();
    const ojson patch = ojson::parse(c.json);  // named: items() must not outlive a temporary
    for (auto& [k, v] : patch.items()) b[k] = v;
    auto e = chat_err(b);
    ASSERT_TRUE(e.has_value()) << c.json;
    EXPECT_EQ(e->status, 400) << c.json;
    EXPECT_EQ(e->param, c.param) << c.json;
  }
  // Caps: 2049 messages, 129 tools, 1025 logit_bias entries.
  ojson b = base_chat();
  b["messages"] = ojson::array();
  for (int i = 0; i < 2049; ++i) b["messages"].push_back(ojson::parse(R"({"role":"user","content":"x"})"));
  EXPECT_EQ(chat_err(b)->param, "messages");
  b = base_chat();
  b["tools"] = ojson::array();
  for (int i = 0; i < 129; ++i)
    b["tools"].push_back(
        ojson::parse(fmt::format(R"({{"type":"function","function":{{"name":"f{}"}}}})", i)));
  EXPECT_EQ(chat_err(b)->param, "tools");
  b = base_chat();
  b["logit_bias"] = ojson::object();
  for (int i = 0; i < 1025; ++i) b["logit_bias"][std::to_string(i)] = 1;
  EXPECT_EQ(chat_err(b)->param, "logit_bias");
}

// Issue 14 item 7: every field the OpenAI schema marks nullable takes null as "the default", as OpenAI and
// vLLM do; LangChain's completions client sends "seed": null on every call.
// The server's sampling bounds are runtime/sampling_limits.h's, the table the CLI checks its flags against:
// each range's ends are accepted or refused as the table says, for chat and completions alike.
TEST(Protocol, SamplingRangesAreTheRuntimeTable) {
  using namespace runtime;
  for (const SamplingRange& r : {kTemperatureRange, kTopPRange, kMinPRange, kPresencePenaltyRange,
                                 kFrequencyPenaltyRange, kRepetitionPenaltyRange}) {
    const double step = 1e-3;
    const std::pair<double, bool> probes[] = {
        {r.lo, !r.lo_open}, {r.lo - step, false}, {r.hi, true}, {r.hi + step, false}, {r.lo + step, true}};
    for (const auto& [v, ok] : probes) {
      ojson chat = base_chat();
      chat[r.name] = v;
      ojson completion = ojson::parse(R"({"model":"m","prompt":"x"})");
      completion[r.name] = v;
      auto ce = chat_err(chat);
      const auto parsed = parse_completion_request(completion, kLim);
      EXPECT_EQ(!ce.has_value(), ok) << r.name << " = " << v;
      EXPECT_EQ(std::holds_alternative<CompletionRequest>(parsed), ok) << r.name << " = " << v;
      if (ce) {
        EXPECT_EQ(ce->param, r.name);
      }
    }
  }
  ojson b = base_chat();
  b["top_k"] = kTopKMin;
  EXPECT_FALSE(chat_err(b).has_value());
  b["top_k"] = kTopKMin - 1;
  ASSERT_TRUE(chat_err(b).has_value());
  EXPECT_EQ(chat_err(b)->param, "top_k");
}

TEST(Protocol, NullableFieldsMeanDefault) {
  const char* nullable[] = {"seed",
                            "n",
                            "max_tokens",
                            "max_completion_tokens",
                            "top_logprobs",
                            "temperature",
                            "top_p",
                            "stop",
                            "logprobs",
                            "presence_penalty",
                            "frequency_penalty",
                            "user",
                            "tools",
                            "tool_choice",
                            "response_format",
                            "stream_options",
                            "logit_bias",
                            "stream",
                            "parallel_tool_calls",
                            "top_k",
                            "min_p",
                            "min_tokens",
                            "repetition_penalty",
                            "reasoning_effort",
                            "metadata",
                            "store",
                            "service_tier",
                            "functions",
                            "function_call",
                            "stop_token_ids",
                            "chat_template_kwargs",
                            "include_reasoning"};
  ojson all = base_chat();
  for (const char* f : nullable) {
    ojson b = base_chat();
    b[f] = nullptr;
    all[f] = nullptr;
    auto r = parse_chat_request(b, kLim);
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << f << ": " << std::get<ApiError>(r).message;
    const auto& c = std::get<ChatRequest>(r);
    EXPECT_EQ(c.gen.n, 1) << f;
    EXPECT_FALSE(c.gen.max_tokens.has_value()) << f;
    EXPECT_FALSE(c.gen.seed.has_value()) << f;
    EXPECT_FALSE(c.gen.logprobs) << f;
    EXPECT_EQ(c.gen.top_logprobs, 0) << f;
  }
  EXPECT_TRUE(std::holds_alternative<ChatRequest>(parse_chat_request(all, kLim)));
  ojson comp = ojson::parse(R"({"model":"m","prompt":"hi"})");
  for (const char* f :
       {"seed", "n", "max_tokens", "logprobs", "temperature", "top_p", "stop", "echo", "best_of", "suffix",
        "user", "presence_penalty", "frequency_penalty", "logit_bias", "stream", "stream_options"})
    comp[f] = nullptr;
  auto r = parse_completion_request(comp, kLim);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  EXPECT_FALSE(std::get<CompletionRequest>(r).gen.seed.has_value());
  EXPECT_FALSE(std::get<CompletionRequest>(r).gen.max_tokens.has_value());
}

TEST(Protocol, AcceptedRequestsNormalize) {
  auto b = ojson::parse(R"({"model":"m","messages":[
      {"role":"developer","content":"sys"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"reasoning":"why","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"f","arguments":"{\"z\":1,\"a\":\"x\"}"}}]},
      {"role":"tool","content":"42","tool_call_id":"c1"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],
    "reasoning_effort":"none","chat_template_kwargs":{"preserve_thinking":true},
    "user":"u","metadata":{},"store":false,"service_tier":"auto","unknown_field":1,
    "max_tokens":5,"max_completion_tokens":7,"stop":"x","stream":true,"stream_options":{"include_usage":true}})");
  auto r = parse_chat_request(b, kLim);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  auto& c = std::get<ChatRequest>(r);
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[1]["content"], "ab");
  EXPECT_EQ(c.messages[2]["reasoning_content"], "why");
  EXPECT_EQ(dump(c.messages[2]["tool_calls"][0]["function"]["arguments"]), R"({"z":1,"a":"x"})");
  EXPECT_EQ(c.enable_thinking, std::optional<bool>(false));
  EXPECT_EQ(c.template_kwargs["preserve_thinking"], true);
  EXPECT_EQ(c.gen.max_tokens, std::optional<int64_t>(7));
  EXPECT_TRUE(c.gen.include_usage);
  EXPECT_EQ(c.tool_choice, ToolChoice::kAuto);
  // Precedence: chat_template_kwargs.enable_thinking > reasoning_effort.
  auto b2 = base_chat();
  b2["reasoning_effort"] = "none";
  b2["chat_template_kwargs"] = ojson::parse(R"({"enable_thinking":true})");
  EXPECT_EQ(std::get<ChatRequest>(parse_chat_request(b2, kLim)).enable_thinking, std::optional<bool>(true));
  b2.erase("chat_template_kwargs");
  b2["reasoning_effort"] = "no_think";
  EXPECT_EQ(std::get<ChatRequest>(parse_chat_request(b2, kLim)).enable_thinking, std::optional<bool>(false));
  b2["reasoning_effort"] = "high";
  EXPECT_EQ(std::get<ChatRequest>(parse_chat_request(b2, kLim)).enable_thinking, std::optional<bool>(true));
  // tool_choice none drops tools from the prompt and turns the parser off.
  auto b3 = base_chat();
  b3["tools"] = ojson::parse(R"([{"type":"function","function":{"name":"f"}}])");
  b3["tool_choice"] = "none";
  auto c3 = std::get<ChatRequest>(parse_chat_request(b3, kLim));
  EXPECT_TRUE(c3.tools.is_null());
  EXPECT_TRUE(c3.tools_for_parser.is_null());
}

TEST(Protocol, CompletionPrompts) {
  auto ok = [](const char* j) {
    return std::holds_alternative<CompletionRequest>(parse_completion_request(ojson::parse(j), kLim));
  };
  EXPECT_TRUE(ok(R"({"model":"m","prompt":"def f():"})"));
  EXPECT_TRUE(ok(R"({"model":"m","prompt":["a","b"]})"));
  EXPECT_TRUE(ok(R"({"model":"m","prompt":[1,2,3]})"));
  EXPECT_TRUE(ok(R"({"model":"m","prompt":[[1,2],[3]]})"));
  EXPECT_TRUE(ok(R"({"model":"m","prompt":"x","logprobs":5,"echo":true})"));
  for (const char* j :
       {R"({"model":"m","prompt":""})", R"({"model":"m","prompt":[]})", R"({"model":"m"})",
        R"({"model":"m","prompt":[4096]})", R"({"model":"m","prompt":[-1]})",
        R"({"model":"m","prompt":[[1],[99999999999]]})", R"({"model":"m","prompt":"x","suffix":"y"})",
        R"({"model":"m","prompt":"x","logprobs":6})", R"({"model":"m","prompt":"x","logprobs":true})",
        R"({"model":"m","prompt":{"a":1}})"}) {
    auto r = parse_completion_request(ojson::parse(j), kLim);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << j;
    EXPECT_EQ(std::get<ApiError>(r).status, 400);
  }
  // The cap of 64 counts prompts, not the token ids of one prompt (T17 sends a 300-token id prompt: its
  // length is the context check's business, a 400 context_length_exceeded).
  ojson long_ids = ojson::parse(R"({"model":"m"})");
  long_ids["prompt"] = ojson::array();
  for (int i = 0; i < 300; ++i) long_ids["prompt"].push_back(10 + i);
  auto lr = parse_completion_request(long_ids, kLim);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(lr));
  EXPECT_EQ(std::get<std::vector<int32_t>>(std::get<CompletionRequest>(lr).prompts.at(0)).size(), 300u);
  ojson many = ojson::parse(R"({"model":"m"})");
  many["prompt"] = ojson::array();
  for (int i = 0; i < 65; ++i) many["prompt"].push_back("x");
  auto mr = parse_completion_request(many, kLim);
  ASSERT_TRUE(std::holds_alternative<ApiError>(mr));
  EXPECT_EQ(std::get<ApiError>(mr).param, "prompt");
  auto oov = parse_completion_request(ojson::parse(R"({"model":"m","prompt":[5000]})"), kLim);
  EXPECT_NE(std::get<ApiError>(oov).message.find("out of vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace gridq::serve

// max_tokens against the context length (api.md §2) and the chunk shapes (§4), split from
// test_openai_protocol.cpp.
#include <gtest/gtest.h>

#include "serve/openai_protocol.h"

namespace gridq::serve {
namespace {

TEST(Protocol, ContextLength) {
  auto r = resolve_max_tokens(4000, 200, 4096, -1);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  auto& e = std::get<ApiError>(r);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("4096"), std::string::npos);
  EXPECT_NE(e.message.find("4000"), std::string::npos);
  EXPECT_NE(e.message.find("200"), std::string::npos);
  EXPECT_EQ(std::get<int64_t>(resolve_max_tokens(4000, std::nullopt, 4096, -1)), 96);
  EXPECT_EQ(std::get<int64_t>(resolve_max_tokens(4090, std::nullopt, 4096, 16)), 6);
  EXPECT_EQ(std::get<int64_t>(resolve_max_tokens(10, 96, 4096, -1)), 96);
  EXPECT_TRUE(std::holds_alternative<ApiError>(resolve_max_tokens(4096, std::nullopt, 4096, -1)));
}

TEST(Protocol, ChunkShapes) {
  ojson d = ojson::object();
  d["role"] = "assistant";
  d["content"] = "";
  auto c = chat_chunk_json("chatcmpl-x", 5, "m", 0, d, "", nullptr, true);
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
  auto ev = sse_event(c);
  EXPECT_EQ(ev.rfind("data: ", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_EQ(ev.find('\n'), ev.size() - 2) << "one JSON object per event line";
  auto u = usage_chunk_json("chatcmpl-x", 5, "m", "chat.completion.chunk", Usage{3, 4});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);
  EXPECT_FALSE(
      u["usage"].contains("prompt_tokens_details"));  // as vLLM without --enable-prompt-tokens-details
  auto uc = usage_json(Usage{300, 4, 162});
  EXPECT_EQ(uc["prompt_tokens_details"]["cached_tokens"], 162);
  EXPECT_EQ(uc["total_tokens"], 304);
  EXPECT_EQ(usage_json(Usage{3, 4, 0})["prompt_tokens_details"]["cached_tokens"], 0);
  auto id = random_id("call_");
  EXPECT_EQ(id.size(), 5u + 24u);
  ChatChoiceOut o;
  o.tool_calls.push_back({"call_1", "f", "{}"});
  o.finish_reason = "tool_calls";
  auto resp = chat_response_json("chatcmpl-x", 1, "m", {o}, Usage{1, 2}, true);
  EXPECT_TRUE(resp["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(resp["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
}

}  // namespace
}  // namespace gridq::serve

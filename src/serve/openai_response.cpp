// Response bodies and SSE chunks (api.md §4): ids, logprobs, usage, and the chat / completion objects in
// OpenAI's field order.
#include <chrono>
#include <random>

#include "serve/openai_protocol.h"

namespace gridq::serve {

std::string random_id(std::string_view prefix, size_t n) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s(prefix);
  for (size_t i = 0; i < n; ++i) s += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
ojson lp_entry(const TokenLogprob& t) {
  ojson e = ojson::object();
  e["token"] = t.token;
  e["logprob"] = t.logprob;
  e["bytes"] = t.bytes;
  return e;
}
}  // namespace

ojson chat_logprobs_json(const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const auto& t : lps) {
    ojson e = lp_entry(t);
    ojson top = ojson::array();
    for (const auto& a : t.top) top.push_back(lp_entry(a));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  ojson out = ojson::object();
  out["content"] = std::move(content);
  out["refusal"] = nullptr;
  return out;
}

ojson completion_logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset_start) {
  ojson tokens = ojson::array(), tlp = ojson::array(), top = ojson::array(), off = ojson::array();
  size_t pos = text_offset_start;
  for (const auto& t : lps) {
    tokens.push_back(t.token);
    off.push_back(pos);
    // Code points: every byte that does not continue a UTF-8 sequence starts one.
    for (unsigned char c : t.token) pos += (c & 0xC0) != 0x80;
    if (t.unscored) {
      tlp.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    tlp.push_back(t.logprob);
    ojson m = ojson::object();
    for (const auto& a : t.top)
      if (!m.contains(a.token)) m[a.token] = a.logprob;
    top.push_back(std::move(m));
  }
  ojson out = ojson::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(tlp);
  out["top_logprobs"] = std::move(top);
  out["text_offset"] = std::move(off);
  return out;
}

ojson usage_json(const Usage& in) {
  ojson u = ojson::object();
  u["prompt_tokens"] = in.prompt_tokens;
  u["completion_tokens"] = in.completion_tokens;
  u["total_tokens"] = in.prompt_tokens + in.completion_tokens;
  if (in.cached_tokens >= 0) {
    ojson d = ojson::object();
    d["cached_tokens"] = in.cached_tokens;
    u["prompt_tokens_details"] = std::move(d);
  }
  return u;
}

namespace {

// The fields every response and chunk object starts with, in OpenAI's order.
ojson object_head(const std::string& id, int64_t created, const std::string& model, const char* object) {
  ojson out = ojson::object();
  out["id"] = id;
  out["object"] = object;
  out["created"] = created;
  out["model"] = model;
  return out;
}

ojson response_json(ojson head, ojson choices, const Usage& usage) {
  head["choices"] = std::move(choices);
  head["usage"] = usage_json(usage);
  return head;
}

// A chunk carrying one choice: finish_reason "" -> null (§4 rule 6), `usage: null` when the stream reports
// usage at its end (rule 7).
ojson one_choice_chunk(ojson head, ojson choice, const std::string& finish_reason, const ojson& logprobs,
                       bool include_usage_field) {
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? ojson(nullptr) : ojson(finish_reason);
  head["choices"] = ojson::array({std::move(choice)});
  if (include_usage_field) head["usage"] = nullptr;
  return head;
}

}  // namespace

ojson chat_response_json(const std::string& id, int64_t created, const std::string& model,
                         const std::vector<ChatChoiceOut>& choices, const Usage& usage,
                         bool include_reasoning) {
  ojson cs = ojson::array();
  for (const auto& c : choices) {
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    const bool has_reasoning = include_reasoning && c.reasoning && !c.reasoning->empty();
    if (c.content && !c.content->empty())
      msg["content"] = *c.content;
    else if (!c.tool_calls.empty() || has_reasoning)
      msg["content"] = nullptr;
    else
      msg["content"] = "";
    if (include_reasoning) {
      msg["reasoning_content"] = has_reasoning ? ojson(*c.reasoning) : ojson(nullptr);
      msg["reasoning"] = has_reasoning ? ojson(*c.reasoning) : ojson(nullptr);
    }
    if (!c.tool_calls.empty()) {
      ojson tcs = ojson::array();
      for (const auto& t : c.tool_calls) {
        ojson fn = ojson::object();
        fn["name"] = t.name;
        fn["arguments"] = t.arguments;
        ojson tc = ojson::object();
        tc["id"] = t.id;
        tc["type"] = "function";
        tc["function"] = std::move(fn);
        tcs.push_back(std::move(tc));
      }
      msg["tool_calls"] = std::move(tcs);
    }
    ojson ch = ojson::object();
    ch["index"] = c.index;
    ch["message"] = std::move(msg);
    ch["logprobs"] = c.logprobs ? *c.logprobs : ojson(nullptr);
    ch["finish_reason"] = c.finish_reason;
    cs.push_back(std::move(ch));
  }
  return response_json(object_head(id, created, model, "chat.completion"), std::move(cs), usage);
}

ojson completion_response_json(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<CompletionChoiceOut>& choices, const Usage& usage) {
  ojson cs = ojson::array();
  for (const auto& c : choices) {
    ojson ch = ojson::object();
    ch["index"] = c.index;
    ch["text"] = c.text;
    ch["logprobs"] = c.logprobs ? *c.logprobs : ojson(nullptr);
    ch["finish_reason"] = c.finish_reason;
    cs.push_back(std::move(ch));
  }
  return response_json(object_head(id, created, model, "text_completion"), std::move(cs), usage);
}

std::string sse_event(const ojson& j) { return "data: " + dump(j) + "\n\n"; }

ojson chat_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                      const ojson& delta, const std::string& finish_reason, const ojson& logprobs,
                      bool include_usage_field) {
  ojson ch = ojson::object();
  ch["index"] = index;
  ch["delta"] = delta;
  return one_choice_chunk(object_head(id, created, model, "chat.completion.chunk"), std::move(ch),
                          finish_reason, logprobs, include_usage_field);
}

ojson completion_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                            const std::string& text, const std::string& finish_reason, const ojson& logprobs,
                            bool include_usage_field) {
  ojson ch = ojson::object();
  ch["index"] = index;
  ch["text"] = text;
  return one_choice_chunk(object_head(id, created, model, "text_completion"), std::move(ch), finish_reason,
                          logprobs, include_usage_field);
}

ojson usage_chunk_json(const std::string& id, int64_t created, const std::string& model, const char* object,
                       const Usage& usage) {
  return response_json(object_head(id, created, model, object), ojson::array(), usage);
}

}  // namespace gridq::serve

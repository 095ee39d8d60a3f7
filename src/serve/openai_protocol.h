// OpenAI HTTP API: request parsing and validation (api.md §2, §7, §9 caps), the error shape (§3), and the
// response / SSE chunk builders (§4). Pure functions over JSON; no I/O, no model. Defined in
// openai_protocol.cpp (errors, the body, field readers), openai_request.cpp (shared generation fields,
// completions), openai_chat_request.cpp (messages, tools) and openai_response.cpp (bodies, chunks).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "grammar/compile.h"
#include "runtime/sampler.h"
#include "text/tool_parser_common.h"

namespace gridq::serve {

using ojson = nlohmann::ordered_json;

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;   // "" -> null
  std::string param;  // "" -> null
  std::string message;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Retry-After
};

ApiError invalid(std::string param, std::string message, std::string code = "invalid_value");
ojson error_json(const ApiError& e);
std::string error_body(const ApiError& e);

// Parses an HTTP body as one JSON document: refuses invalid JSON, duplicate keys, nesting deeper than
// `max_depth`, invalid UTF-8 and lone surrogates. Keys keep their order (tools render byte-exact).
std::variant<ojson, ApiError> parse_body_json(std::string_view body, int max_depth = 64);

struct Limits {
  int32_t vocab_size = 0;
  int64_t max_model_len = 0;
  size_t max_messages = 2048;
  size_t max_tools = 128;
};

// Structured outputs: what a request's output must be (docs/serving.md), from response_format, vLLM's
// structured_outputs object or its older guided_* fields (at most one of them). Compiled by the API server
// (serve/constraint.h) before the request is queued.
struct GrammarSpec {
  grammar::InputKind kind = grammar::InputKind::kJsonObject;
  std::string text;  // the schema / regex / choice list (a JSON array) / GBNF; "" for json_object
  bool flexible_whitespace = false;
  std::string param;  // the request field it came from, named by a compile error's 400
};

// structured_request.cpp: parses and validates the fields above (a 400 naming the field and the rule).
std::optional<ApiError> parse_structured(const ojson& body, std::optional<GrammarSpec>& out);

// Generation fields shared by chat and completions.
struct GenParams {
  std::optional<int64_t> max_tokens;
  // The request's sampling fields as the runtime sampler takes them (fp32); serve/sampling.h adds each
  // choice's seed and the OpenAI penalty window.
  runtime::SamplingParams sampling;
  std::optional<int64_t> seed;
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool logprobs = false;
  int top_logprobs = 0;  // chat: 0..20 with logprobs; completions: the integer `logprobs` 0..5
  bool stream = false;
  bool include_usage = false;
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // Extension (docs/api.md): special-token text in messages or a prompt string encodes as the control ids,
  // as transformers does; by default it encodes as text so content cannot forge turns or calls.
  bool allow_special_tokens = false;
  std::optional<GrammarSpec> grammar;  // structured outputs; nullopt: unconstrained
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest {
  std::string model;
  ojson messages;  // normalized: developer -> system, content parts -> text, tool-call arguments decoded
  ojson tools;     // array, or null when absent / tool_choice none
  ojson tools_for_parser;  // tools as given (null when parsing is off)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
  std::optional<bool>
      enable_thinking;  // resolved from chat_template_kwargs > reasoning_effort; unset = default
  ojson template_kwargs = ojson::object();  // extra template variables (validated)
  bool include_reasoning = true;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  GenParams gen;
};

struct CompletionRequest {
  std::string model;
  // Each prompt is text or token ids.
  std::vector<std::variant<std::string, std::vector<int32_t>>> prompts;
  bool echo = false;
  GenParams gen;
};

std::variant<ChatRequest, ApiError> parse_chat_request(const ojson& body, const Limits& lim);
std::variant<CompletionRequest, ApiError> parse_completion_request(const ojson& body, const Limits& lim);

// Context check (§3): returns the max_tokens to use, or a 400 context_length_exceeded naming both counts.
// `absent_default` < 0 means "the remaining context".
std::variant<int64_t, ApiError> resolve_max_tokens(int64_t prompt_tokens,
                                                   const std::optional<int64_t>& requested,
                                                   int64_t max_model_len, int64_t absent_default);

// ---- responses ----
std::string random_id(std::string_view prefix, size_t n = 24);
int64_t unix_now();

struct TokenLogprob {
  std::string token;  // decoded text of the token (U+FFFD for partial UTF-8)
  std::vector<uint8_t> bytes;
  double logprob = 0.0;
  std::vector<TokenLogprob> top;
  bool unscored = false;  // the first prompt token of an echo: nothing precedes it, logprob and top are null
};

ojson chat_logprobs_json(const std::vector<TokenLogprob>& lps);
// text_offset counts characters (code points) of the choice's text, as OpenAI's (Python string) offsets do.
ojson completion_logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset_start);

struct ToolCallOut {
  std::string id, name, arguments;
};

struct ChatChoiceOut {
  int index = 0;
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;
  std::optional<ojson> logprobs;
};

// A response's token counts. cached_tokens: prompt tokens the prefix cache spared (positions no forward
// ran for), reported as usage.prompt_tokens_details.cached_tokens; −1 leaves prompt_tokens_details out (the
// default, as vLLM without --enable-prompt-tokens-details).
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = -1;
};
ojson usage_json(const Usage& u);
ojson chat_response_json(const std::string& id, int64_t created, const std::string& model,
                         const std::vector<ChatChoiceOut>& choices, const Usage& usage,
                         bool include_reasoning);

struct CompletionChoiceOut {
  int index = 0;
  std::string text;
  std::string finish_reason;
  std::optional<ojson> logprobs;
};
ojson completion_response_json(const std::string& id, int64_t created, const std::string& model,
                               const std::vector<CompletionChoiceOut>& choices, const Usage& usage);

// SSE framing: "data: <json>\n\n".
std::string sse_event(const ojson& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// One chat.completion.chunk. `delta` must follow §4 (role first, never empty later). finish_reason "" ->
// null.
ojson chat_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                      const ojson& delta, const std::string& finish_reason, const ojson& logprobs,
                      bool include_usage_field);
ojson completion_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                            const std::string& text, const std::string& finish_reason, const ojson& logprobs,
                            bool include_usage_field);
ojson usage_chunk_json(const std::string& id, int64_t created, const std::string& model, const char* object,
                       const Usage& usage);

// Serialises with invalid UTF-8 replaced, never throwing.
std::string dump(const ojson& j);

}  // namespace gridq::serve

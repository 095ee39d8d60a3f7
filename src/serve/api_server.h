// The OpenAI endpoints (api.md §1): /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics,
// /tokenize, /detokenize. Validates requests (openai_protocol), renders chat prompts, submits work to the
// scheduler and turns tokens into responses or SSE streams through per-choice OutputProcessors. The routes
// that need no scheduler are in api_info.cpp, structured outputs in api_structured.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "serve/constraint.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "serve/openai_protocol.h"
#include "serve/output_processor.h"
#include "serve/scheduler.h"
#include "text/tokenizer.h"

namespace gridq::serve {

// Renders a chat prompt: (messages, tools or null, add_generation_prompt, extra template variables) -> text.
using ChatRenderer = std::function<Expected<std::string>(const ojson& messages, const ojson& tools,
                                                         bool add_generation_prompt, const ojson& kwargs)>;

struct ModelBinding {
  std::vector<std::string> served_names;  // first is the id reported by /v1/models
  int64_t max_model_len = 0;
  const text::Tokenizer* tok = nullptr;
  std::vector<int32_t> eos_ids;
  int32_t end_of_turn_id = -1;  // </assistant>
  text::ReasoningMarkers markers;
  bool reasoning_parser = true;
  int32_t tool_call_open_id = -1, tool_call_close_id = -1;
  ToolParserKind tool_parser = ToolParserKind::kPoolside;
  ChatRenderer render;
  ojson default_template_kwargs = ojson::object();
  // --enable-prompt-tokens-details (vLLM's flag): usage reports prompt_tokens_details.cached_tokens.
  bool prompt_tokens_details = false;
};

class ApiServer {
 public:
  enum class State { kLoading, kReady, kDraining, kFailed };

  ApiServer(HttpServer& http, Metrics& metrics);
  // Registers every route on the HTTP server (call before HttpServer::start()).
  void register_routes();
  // The model is loaded: from now on requests are served.
  void set_ready(ModelBinding model, Scheduler* scheduler);
  void set_state(State s) { state_ = s; }
  State state() const { return state_; }
  // Shutdown, when the engine did not end the aborted requests in time (it is inside a long step): ends every
  // request still in flight from the calling thread (503, or an error event then [DONE] for streams). A late
  // callback of the step is ignored by then.
  void abort_inflight();
  int64_t created() const { return created_; }

 private:
  void handle_chat(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_completions(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_models(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_model(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);  // GET /v1/models/{id}
  void handle_version(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  ojson model_json(const std::string& name) const;
  void handle_health(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_metrics(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_tokenize(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  void handle_detokenize(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch);
  // Common preamble: ready check and body parse. Returns false after answering.
  bool prepare(const HttpRequest& req, ResponseChannel& ch, ojson& body);
  bool check_model(const std::string& model, ResponseChannel& ch) const;
  // prepare(), then request validation and the served-model check shared by the generation routes.
  // nullopt after answering.
  template <typename Request>
  std::optional<Request> validated(const HttpRequest& req, ResponseChannel& ch,
                                   std::variant<Request, ApiError> (*parse)(const ojson&, const Limits&));

  void track(const std::vector<std::shared_ptr<SchedRequest>>& parts);
  // api_structured.cpp: the request's grammar compiled (through the cache), null when unconstrained, or a
  // 400 naming the field and what the compiler refused.
  std::variant<std::shared_ptr<CompiledGrammar>, ApiError> request_grammar(const GenParams& g);
  // The same for a chat request's tool_choice "required" or named function: the tool-call grammar of the
  // model's tool parser (poolside_v1 or JSON) over the tool vocabulary; null when nothing forces a call.
  std::variant<std::shared_ptr<CompiledGrammar>, ApiError> tool_grammar(const ChatRequest& r);

  HttpServer& http_;
  Metrics& metrics_;
  std::atomic<State> state_{State::kLoading};
  ModelBinding model_;
  Scheduler* sched_ = nullptr;
  int64_t created_;
  std::mutex inflight_mu_;
  std::vector<std::weak_ptr<SchedRequest>> inflight_;  // submitted requests (expired once done)
  // Built on the first constrained request: the text vocabulary, and the tool vocabulary in which the
  // <tool_call> markers are grammar text (grammar/tool_call.h).
  std::once_flag grammars_once_, tool_grammars_once_;
  std::unique_ptr<GrammarCache> grammars_, tool_grammars_;
};

}  // namespace gridq::serve

#include "serve/api_server.h"

#include <fmt/format.h>

#include "serve/api_job.h"
#include "serve/sampling.h"
#include "text/content_escape.h"

namespace gridq::serve {

ApiServer::ApiServer(HttpServer& http, Metrics& metrics)
    : http_(http), metrics_(metrics), created_(unix_now()) {}

void ApiServer::register_routes() {
  auto bind = [this](void (ApiServer::*fn)(const HttpRequest&, std::shared_ptr<ResponseChannel>)) {
    return [this, fn](const HttpRequest& r, std::shared_ptr<ResponseChannel> ch) {
      (this->*fn)(r, std::move(ch));
    };
  };
  http_.add_route(
      {"/v1/chat/completions", "POST", "/v1/chat/completions", bind(&ApiServer::handle_chat), false});
  http_.add_route(
      {"/v1/completions", "POST", "/v1/completions", bind(&ApiServer::handle_completions), false});
  http_.add_route({"/v1/models", "GET", "/v1/models", bind(&ApiServer::handle_models), false});
  http_.add_route({"/v1/models/", "GET", "/v1/models/{id}", bind(&ApiServer::handle_model), false, true});
  http_.add_route({"/version", "GET", "/version", bind(&ApiServer::handle_version), true});
  http_.add_route({"/health", "GET", "/health", bind(&ApiServer::handle_health), true});
  http_.add_route({"/metrics", "GET", "/metrics", bind(&ApiServer::handle_metrics), false});
  http_.add_route({"/tokenize", "POST", "/tokenize", bind(&ApiServer::handle_tokenize), false});
  http_.add_route({"/detokenize", "POST", "/detokenize", bind(&ApiServer::handle_detokenize), false});
}

void ApiServer::set_ready(ModelBinding model, Scheduler* scheduler) {
  model_ = std::move(model);
  sched_ = scheduler;
  state_ = State::kReady;
}

bool ApiServer::prepare(const HttpRequest& req, ResponseChannel& ch, ojson& body) {
  State s = state_;
  if (s == State::kReady && sched_ && sched_->failed()) s = State::kFailed;
  if (s != State::kReady) {
    const char* code = s == State::kLoading    ? "loading"
                       : s == State::kDraining ? "shutting_down"
                                               : "engine_failed";
    ch.send_error(status_error(503, "unavailable_error", code,
                               s == State::kLoading    ? "the model is still loading"
                               : s == State::kDraining ? "the server is shutting down"
                                                       : "the engine failed"));
    return false;
  }
  auto parsed = parse_body_json(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    ch.send_error(*e);
    return false;
  }
  body = std::move(std::get<ojson>(parsed));
  return true;
}

bool ApiServer::check_model(const std::string& model, ResponseChannel& ch) const {
  for (const auto& n : model_.served_names)
    if (n == model) return true;
  ApiError e = status_error(404, "not_found_error", "model_not_found",
                            fmt::format("The model `{}` does not exist; this server serves `{}`.", model,
                                        model_.served_names.empty() ? "" : model_.served_names[0]));
  e.param = "model";
  ch.send_error(e);
  return false;
}

namespace {

ApiError submit_error(const SubmitError& e) {
  return status_error(e.status,
                      e.status == 429   ? "rate_limit_error"
                      : e.status == 400 ? "invalid_request_error"
                                        : "unavailable_error",
                      e.code, e.message);
}

// Stop ids (§8): stop_token_ids, EOS unless ignore_eos, and </assistant> for chat.
std::vector<int32_t> stop_ids_for(const GenParams& g, const ModelBinding& m, bool chat) {
  std::vector<int32_t> ids = g.stop_token_ids;
  if (!g.ignore_eos) ids.insert(ids.end(), m.eos_ids.begin(), m.eos_ids.end());
  if (chat && m.end_of_turn_id >= 0) ids.push_back(m.end_of_turn_id);
  return ids;
}

std::shared_ptr<Job> make_job(std::shared_ptr<ResponseChannel> ch, const ModelBinding& m, Metrics& metrics,
                              bool chat, const std::string& model, const GenParams& g) {
  auto job = std::make_shared<Job>(std::move(ch), m, metrics, chat, g.stream);
  job->model = model;
  job->include_usage = g.include_usage;
  job->want_logprobs = g.logprobs;
  return job;
}

// The output settings both routes share; chat adds reasoning and tools.
OutputSpec output_spec(const ModelBinding& m, const GenParams& g) {
  OutputSpec spec;
  spec.tok = m.tok;
  spec.stop = g.stop;
  spec.include_stop_str = g.include_stop_str_in_output;
  spec.skip_special = g.skip_special_tokens;
  spec.streaming = g.stream;
  return spec;
}

// Queues every part of a job (all or none), cancels them when the client goes away, and starts the stream.
// False after answering with the submit error.
bool submit_parts(Scheduler& sched, ResponseChannel& ch, Job& job,
                  const std::vector<std::shared_ptr<SchedRequest>>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (auto e = sched.submit(parts[i])) {
      for (size_t k = 0; k < i; ++k) parts[k]->cancelled = true;
      ch.send_error(submit_error(*e));
      return false;
    }
  }
  std::vector<std::weak_ptr<SchedRequest>> wps(parts.begin(), parts.end());
  ch.on_disconnect([wps] {
    for (auto& w : wps)
      if (auto p = w.lock()) p->cancelled = true;
  });
  job.begin_stream();
  return true;
}

}  // namespace

void ApiServer::track(const std::vector<std::shared_ptr<SchedRequest>>& parts) {
  std::lock_guard lk(inflight_mu_);
  std::erase_if(inflight_, [](const std::weak_ptr<SchedRequest>& w) { return w.expired(); });
  inflight_.insert(inflight_.end(), parts.begin(), parts.end());
}

void ApiServer::abort_inflight() {
  std::vector<std::shared_ptr<SchedRequest>> live;
  {
    std::lock_guard lk(inflight_mu_);
    for (auto& w : inflight_)
      if (auto p = w.lock()) live.push_back(std::move(p));
    inflight_.clear();
  }
  for (auto& p : live) p->on_error(503, "shutting_down", "the server shut down before the request finished");
}

template <typename Request>
std::optional<Request> ApiServer::validated(const HttpRequest& req, ResponseChannel& ch,
                                            std::variant<Request, ApiError> (*parse)(const ojson&,
                                                                                     const Limits&)) {
  ojson body;
  if (!prepare(req, ch, body)) return std::nullopt;
  auto parsed = parse(body, Limits{static_cast<int32_t>(model_.tok->vocab_size()), model_.max_model_len});
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    ch.send_error(*e);
    return std::nullopt;
  }
  if (!check_model(std::get<Request>(parsed).model, ch)) return std::nullopt;
  return std::move(std::get<Request>(parsed));
}

void ApiServer::handle_chat(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch) {
  auto parsed = validated<ChatRequest>(req, *ch, &parse_chat_request);
  if (!parsed) return;
  ChatRequest& r = *parsed;

  ojson kwargs = model_.default_template_kwargs;
  for (auto it = r.template_kwargs.begin(); it != r.template_kwargs.end(); ++it)
    kwargs[it.key()] = it.value();
  if (r.enable_thinking) kwargs["enable_thinking"] = *r.enable_thinking;
  // Request strings encode as text, the template's markup as control ids (content_escape.h), unless raw.
  const bool raw = r.gen.allow_special_tokens;
  const auto untrusted = [&](const ojson& v) { return raw ? v : text::escape_added_tokens(v, *model_.tok); };
  auto rendered =
      model_.render(untrusted(r.messages), untrusted(r.tools), r.add_generation_prompt, untrusted(kwargs));
  if (!rendered.ok()) return ch->send_error(invalid("messages", "chat template: " + rendered.message()));
  std::string prompt_text = std::move(*rendered);
  if (r.continue_final_message) {
    // Leave the final assistant message open: cut the rendering right after its content.
    const std::string last = untrusted(r.messages.back()["content"]).get<std::string>();
    size_t p = last.empty() ? std::string::npos : prompt_text.rfind(last);
    if (p != std::string::npos) {
      prompt_text.resize(p + last.size());
    } else if (size_t e = prompt_text.rfind("</assistant>"); e != std::string::npos) {
      prompt_text.resize(e);
    }
  }
  auto ids = raw ? model_.tok->try_encode(prompt_text, false) : model_.tok->try_encode_rendered(prompt_text);
  if (!ids.ok()) return ch->send_error(invalid("messages", "tokenizer: " + ids.message()));
  std::vector<int32_t> prompt = std::move(*ids);
  auto mt =
      resolve_max_tokens(static_cast<int64_t>(prompt.size()), r.gen.max_tokens, model_.max_model_len, -1);
  if (auto* e = std::get_if<ApiError>(&mt)) return ch->send_error(*e);

  auto grammar = r.gen.grammar ? request_grammar(r.gen) : tool_grammar(r);  // never both (protocol)
  if (auto* e = std::get_if<ApiError>(&grammar)) return ch->send_error(*e);
  const auto& cg = std::get<std::shared_ptr<CompiledGrammar>>(grammar);

  auto job = make_job(ch, model_, metrics_, true, r.model, r.gen);
  job->include_reasoning = r.include_reasoning;
  job->prompt_tokens = static_cast<int64_t>(prompt.size());
  OutputSpec spec = output_spec(model_, r.gen);
  spec.reasoning = model_.reasoning_parser;
  spec.markers = model_.markers;
  spec.initial = text::initial_reasoning_mode(prompt, model_.markers);
  for (int32_t id : {model_.tool_call_open_id, model_.tool_call_close_id})
    if (id >= 0) spec.keep_text_ids.push_back(id);
  // Constrained content (response_format & co.) holds no calls: it cannot write the special markers.
  if (!r.tools_for_parser.is_null() && !(cg && r.gen.grammar)) {
    spec.tools = model_.tool_parser;
    spec.schemas = text::tool_schemas_from_openai(nlohmann::json::parse(dump(r.tools_for_parser)));
    if (r.tool_choice == ToolChoice::kNamed) spec.filter.only_name = r.tool_choice_name;
    spec.filter.parallel = r.parallel_tool_calls;
  }
  job->choices.resize(r.gen.n);
  for (auto& c : job->choices) c.proc = std::make_unique<OutputProcessor>(spec);

  auto part = std::make_shared<Part>(job, 0);
  part->prompt = std::move(prompt);
  fill_sched_request(*part, r.gen, std::get<int64_t>(mt), stop_ids_for(r.gen, model_, true), 0);
  const bool thinking = spec.reasoning && spec.initial == text::ReasoningMode::kReasoning;
  attach_constraints(*part, cg, thinking ? model_.markers.think_end : -1);
  const std::vector<std::shared_ptr<SchedRequest>> parts = {part};
  if (submit_parts(*sched_, *ch, *job, parts)) track(parts);
}

void ApiServer::handle_completions(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch) {
  auto parsed = validated<CompletionRequest>(req, *ch, &parse_completion_request);
  if (!parsed) return;
  CompletionRequest& r = *parsed;
  if (r.prompts.size() * static_cast<size_t>(r.gen.n) > 64)
    return ch->send_error(invalid("n", "prompts x n exceeds 64 choices"));

  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;
  for (auto& p : r.prompts) {
    std::vector<int32_t> ids;
    if (auto* s = std::get_if<std::string>(&p)) {
      auto enc = model_.tok->try_encode(*s, false, /*match_added_tokens=*/r.gen.allow_special_tokens);
      if (!enc.ok()) return ch->send_error(invalid("prompt", "tokenizer: " + enc.message()));
      ids = std::move(*enc);
      if (ids.empty()) return ch->send_error(invalid("prompt", "prompt encodes to no tokens"));
    } else {
      ids = std::get<std::vector<int32_t>>(p);
    }
    auto mt =
        resolve_max_tokens(static_cast<int64_t>(ids.size()), r.gen.max_tokens, model_.max_model_len, 16);
    if (auto* e = std::get_if<ApiError>(&mt)) {
      ApiError err = *e;
      if (err.param == "messages") err.param = "prompt";
      return ch->send_error(err);
    }
    max_tokens.push_back(std::get<int64_t>(mt));
    prompts.push_back(std::move(ids));
  }

  auto grammar = request_grammar(r.gen);
  if (auto* e = std::get_if<ApiError>(&grammar)) return ch->send_error(*e);
  const auto& cg = std::get<std::shared_ptr<CompiledGrammar>>(grammar);

  auto job = make_job(ch, model_, metrics_, false, r.model, r.gen);
  const OutputSpec spec = output_spec(model_, r.gen);  // raw text: no reasoning or tool parsing
  job->choices.resize(prompts.size() * r.gen.n);
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    job->prompt_tokens += static_cast<int64_t>(prompts[pi].size());
    std::string echo = r.echo ? model_.tok->decode(prompts[pi], r.gen.skip_special_tokens) : "";
    for (int c = 0; c < r.gen.n; ++c) {
      auto& ch_state = job->choices[pi * r.gen.n + c];
      ch_state.proc = std::make_unique<OutputProcessor>(spec);
      ch_state.echo_prefix = echo;
    }
  }
  const std::vector<int32_t> stop_ids = stop_ids_for(r.gen, model_, false);
  std::vector<std::shared_ptr<SchedRequest>> parts;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    auto part = std::make_shared<Part>(job, static_cast<int>(pi) * r.gen.n);
    if (r.echo && r.gen.logprobs) {  // the echoed prompt comes with its tokens' logprobs (issue 14 item 8)
      job->start_prompt_scores(static_cast<int>(pi) * r.gen.n, r.gen.n, prompts[pi][0]);
      part->prompt_logprobs = true;
    }
    part->prompt = std::move(prompts[pi]);
    fill_sched_request(*part, r.gen, max_tokens[pi], stop_ids, static_cast<int>(pi) * r.gen.n);
    attach_constraints(*part, cg, -1);
    parts.push_back(std::move(part));
  }
  if (submit_parts(*sched_, *ch, *job, parts)) track(parts);
}

}  // namespace gridq::serve

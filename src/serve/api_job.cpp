#include "serve/api_job.h"

namespace gridq::serve {

ApiError status_error(int status, std::string type, std::string code, std::string message) {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  if (status == 503 || status == 429) e.headers.push_back({"Retry-After", "5"});
  return e;
}

namespace {

TokenLogprob token_logprob(const text::Tokenizer& tok, int32_t id, float lp) {
  TokenLogprob t;
  std::string bytes = tok.token_bytes(id);
  t.bytes.assign(bytes.begin(), bytes.end());
  int32_t one[1] = {id};
  t.token = tok.decode(one, false);
  t.logprob = lp;
  return t;
}

}  // namespace

Job::Job(std::shared_ptr<ResponseChannel> ch, const ModelBinding& m, Metrics& metrics, bool chat, bool stream)
    : ch_(std::move(ch)), m_(m), metrics_(metrics), chat_(chat), stream_(stream) {
  id_ = random_id(chat ? "chatcmpl-" : "cmpl-");
  created_ = unix_now();
}

void Job::begin_stream() {
  if (!stream_) return;
  std::lock_guard lk(mu_);
  ch_->start_stream();
  if (chat_) {
    for (size_t i = 0; i < choices.size(); ++i) {
      ojson d = ojson::object();
      d["role"] = "assistant";
      d["content"] = "";
      ch_->write(sse_event(
          chat_chunk_json(id_, created_, model, static_cast<int>(i), d, "", nullptr, include_usage)));
      choices[i].role_sent = true;
    }
  }
  started_ = true;
  for (auto& p : pending_) ch_->write(std::move(p));
  pending_.clear();
  if (ended_) ch_->end_stream();
}

bool Job::on_token(int idx, const runtime::SampledToken& t) {
  std::lock_guard lk(mu_);
  if (finished_) return true;
  Choice& c = choices[idx];
  ++c.tokens;
  if (want_logprobs) {
    TokenLogprob lp = token_logprob(*m_.tok, t.token, t.logprob);
    for (const auto& [id, v] : t.top) lp.top.push_back(token_logprob(*m_.tok, id, v));
    (stream_ ? c.pending_lps : c.logprobs).push_back(std::move(lp));
  }
  bool stopped = false;
  OutputDelta d = c.proc->push(t.token, stopped);
  if (stream_) emit(idx, d);
  return stopped;
}

void Job::start_prompt_scores(int first, int n, int32_t first_token) {
  std::lock_guard lk(mu_);
  for (int i = first; i < first + n; ++i) {
    TokenLogprob lp = token_logprob(*m_.tok, first_token, 0.0f);
    lp.unscored = true;
    (stream_ ? choices[i].pending_lps : choices[i].logprobs).push_back(std::move(lp));
  }
}

void Job::on_prompt_logprob(int first, int n, const runtime::SampledToken& t) {
  std::lock_guard lk(mu_);
  if (finished_) return;
  TokenLogprob lp = token_logprob(*m_.tok, t.token, t.logprob);
  for (const auto& [id, v] : t.top) lp.top.push_back(token_logprob(*m_.tok, id, v));
  for (int i = first; i < first + n; ++i)
    (stream_ ? choices[i].pending_lps : choices[i].logprobs).push_back(lp);
}

void Job::on_prompt_cached(int64_t tokens) {
  std::lock_guard lk(mu_);
  cached_tokens_ += tokens;
}

void Job::on_choice_done(int idx, FinishReason r) {
  std::lock_guard lk(mu_);
  if (finished_) return;
  Choice& c = choices[idx];
  if (c.done) return;
  c.done = true;
  if (r == FinishReason::kAbort) {
    aborted_ = true;
  } else {
    OutputDelta d = c.proc->finish();
    c.finish_reason =
        r == FinishReason::kLength ? "length" : (c.proc->saw_tool_calls() ? "tool_calls" : "stop");
    if (stream_) {
      emit(idx, d);
      emit_final(idx);
    }
  }
  if (++done_count_ == choices.size()) complete();
}

void Job::on_error(int status, const std::string& code, const std::string& message) {
  std::lock_guard lk(mu_);
  if (finished_) return;
  finished_ = true;
  fail(status_error(status, status == 503 ? "unavailable_error" : "server_error", code, message));
}

void Job::fail(const ApiError& e) {
  if (stream_) {
    out(sse_event(error_json(e)));
    out(std::string(kSseDone));
    out_end();
  } else {
    ch_->send_error(e);
  }
}

ojson Job::take_logprobs(Choice& c) {
  if (!want_logprobs || c.pending_lps.empty()) return nullptr;
  ojson j = chat_ ? chat_logprobs_json(c.pending_lps) : completion_logprobs_json(c.pending_lps, 0);
  c.pending_lps.clear();
  return j;
}

void Job::write_chat(int idx, const ojson& delta, const std::string& finish) {
  Choice& c = choices[idx];
  out(sse_event(chat_chunk_json(id_, created_, model, idx, delta, finish, take_logprobs(c), include_usage)));
}

void Job::emit(int idx, const OutputDelta& d) {
  Choice& c = choices[idx];
  if (!chat_) {
    std::string text = c.echo_prefix + d.content;
    c.echo_prefix.clear();
    if (!text.empty())
      out(sse_event(
          completion_chunk_json(id_, created_, model, idx, text, "", take_logprobs(c), include_usage)));
    return;
  }
  if (!d.reasoning.empty() && include_reasoning) {
    ojson delta = ojson::object();
    delta["reasoning_content"] = d.reasoning;
    delta["reasoning"] = d.reasoning;
    write_chat(idx, delta, "");
  }
  if (!d.content.empty()) {
    ojson delta = ojson::object();
    delta["content"] = d.content;
    write_chat(idx, delta, "");
  }
  for (const auto& call : d.calls) {
    ojson tc = ojson::object();
    tc["index"] = call.index;
    ojson fn = ojson::object();
    if (call.first) {
      if (static_cast<int>(c.call_ids.size()) <= call.index) c.call_ids.resize(call.index + 1);
      c.call_ids[call.index] = random_id("call_");
      tc["id"] = c.call_ids[call.index];
      tc["type"] = "function";
      fn["name"] = call.name;
    }
    fn["arguments"] = call.arguments;
    tc["function"] = std::move(fn);
    ojson delta = ojson::object();
    delta["tool_calls"] = ojson::array({std::move(tc)});
    write_chat(idx, delta, "");
  }
}

void Job::emit_final(int idx) {
  Choice& c = choices[idx];
  if (chat_) {
    write_chat(idx, ojson::object(), c.finish_reason);
  } else {
    out(sse_event(completion_chunk_json(id_, created_, model, idx, c.echo_prefix, c.finish_reason,
                                        take_logprobs(c), include_usage)));
    c.echo_prefix.clear();
  }
}

void Job::complete() {
  finished_ = true;
  int64_t completion_tokens = 0;
  for (const auto& c : choices) completion_tokens += c.tokens;
  if (aborted_)
    return fail(status_error(503, "unavailable_error", "aborted",
                             "the request was aborted (server shutting down or client gone)"));
  for (const auto& c : choices) metrics_.request_success(c.finish_reason);
  ch_->note_usage(prompt_tokens, completion_tokens);
  const Usage usage{prompt_tokens, completion_tokens, m_.prompt_tokens_details ? cached_tokens_ : -1};
  if (stream_) {
    if (include_usage)
      out(sse_event(usage_chunk_json(id_, created_, model,
                                     chat_ ? "chat.completion.chunk" : "text_completion", usage)));
    out(std::string(kSseDone));
    out_end();
    return;
  }
  if (chat_) {
    std::vector<ChatChoiceOut> outs;
    for (size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      OutputResult r = c.proc->result();
      ChatChoiceOut o;
      o.index = static_cast<int>(i);
      o.content = r.content;
      o.reasoning = r.reasoning;
      for (auto& call : r.calls) o.tool_calls.push_back({random_id("call_"), call.name, call.arguments});
      o.finish_reason = c.finish_reason;
      if (want_logprobs) o.logprobs = chat_logprobs_json(c.logprobs);
      outs.push_back(std::move(o));
    }
    ch_->send(200, "application/json",
              dump(chat_response_json(id_, created_, model, outs, usage, include_reasoning)));
  } else {
    std::vector<CompletionChoiceOut> outs;
    for (size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      OutputResult r = c.proc->result();
      CompletionChoiceOut o;
      o.index = static_cast<int>(i);
      o.text = c.echo_prefix + r.content.value_or("");
      o.finish_reason = c.finish_reason;
      // With echo the logprobs start at the prompt's first token (prompt scoring), so offsets start at 0.
      if (want_logprobs) o.logprobs = completion_logprobs_json(c.logprobs, 0);
      outs.push_back(std::move(o));
    }
    ch_->send(200, "application/json", dump(completion_response_json(id_, created_, model, outs, usage)));
  }
}

void Job::out(std::string data) {
  if (started_)
    ch_->write(std::move(data));
  else
    pending_.push_back(std::move(data));
}

void Job::out_end() {
  if (started_)
    ch_->end_stream();
  else
    ended_ = true;
}

bool Part::on_token(int c, const runtime::SampledToken& t) {
  ChoiceConstraint* k = static_cast<size_t>(c) < constraints.size() ? constraints[c].get() : nullptr;
  const ChoiceConstraint::Verdict v = k ? k->accept(t.token) : ChoiceConstraint::Verdict::kContinue;
  if (v == ChoiceConstraint::Verdict::kRejected) {  // an engine bug, never bad input: fail, do not serve it
    job_->on_error(500, "internal_error", k->error());
    return true;
  }
  const bool stopped = job_->on_token(offset_ + c, t);
  return stopped || v == ChoiceConstraint::Verdict::kComplete;
}

void Part::constrain(int c, runtime::SamplePlan& plan) {
  if (static_cast<size_t>(c) < constraints.size() && constraints[c]) constraints[c]->constrain(plan);
}

void Part::prepare_constraint(int c) {
  if (static_cast<size_t>(c) < constraints.size() && constraints[c]) constraints[c]->prepare();
}

void attach_constraints(Part& part, const std::shared_ptr<CompiledGrammar>& g, int32_t wait_for) {
  if (!g) return;
  part.constraints.clear();
  for (int c = 0; c < part.n; ++c)
    part.constraints.push_back(std::make_unique<ChoiceConstraint>(g, part.stop_ids, wait_for));
}

}  // namespace gridq::serve

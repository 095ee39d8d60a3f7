// One HTTP generation request in flight (api.md §4): the scheduler's callbacks for its choices arrive
// here, on the scheduler thread, and become SSE chunks or, once every choice is done, one JSON response.
// A request's choices may span several prompts (completions with a list of prompts): each prompt is one
// SchedRequest (a Part) whose choice c is the job's choice offset + c.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/api_server.h"
#include "serve/constraint.h"

namespace gridq::serve {

ApiError status_error(int status, std::string type, std::string code, std::string message);

class Job : public std::enable_shared_from_this<Job> {
 public:
  struct Choice {
    std::unique_ptr<OutputProcessor> proc;
    bool role_sent = false;
    bool done = false;
    std::string finish_reason;
    int64_t tokens = 0;
    std::vector<TokenLogprob> logprobs;     // all (non-streaming)
    std::vector<TokenLogprob> pending_lps;  // streaming: not yet attached to a chunk
    std::vector<std::string> call_ids;      // per streamed call index
    std::string echo_prefix;                // completions echo
  };

  Job(std::shared_ptr<ResponseChannel> ch, const ModelBinding& m, Metrics& metrics, bool chat, bool stream);

  std::vector<Choice> choices;
  std::string model;
  bool include_usage = false, include_reasoning = true, want_logprobs = false;
  int64_t prompt_tokens = 0;

  // Called after a successful submit. Chunks produced before this point were buffered, so the role chunks
  // always come first and nothing is written before the response header.
  void begin_stream();
  // The scheduler's callbacks (SchedRequest), for the job's choice `idx`. on_token returns true when the
  // choice must end (a stop string matched, or the job already ended).
  bool on_token(int idx, const runtime::SampledToken& t);
  void on_choice_done(int idx, FinishReason r);
  void on_error(int status, const std::string& code, const std::string& message);
  // A part's prompt positions that the prefix cache spared (SchedRequest::on_prompt_cached).
  void on_prompt_cached(int64_t tokens);
  // Prompt scoring (echo + logprobs) of the job's choices [first, first + n): the prompt's first token,
  // which has no logprob, then each later prompt token's (SchedRequest::on_prompt_logprob).
  void start_prompt_scores(int first, int n, int32_t first_token);
  void on_prompt_logprob(int first, int n, const runtime::SampledToken& t);

 private:
  // The request ends in an error: an HTTP error before streaming, else an error event then [DONE] (§4.8).
  void fail(const ApiError& e);
  ojson take_logprobs(Choice& c);
  void write_chat(int idx, const ojson& delta, const std::string& finish);
  void emit(int idx, const OutputDelta& d);
  void emit_final(int idx);
  void complete();
  void out(std::string data);
  void out_end();

  std::mutex mu_;
  bool started_ = false, ended_ = false;
  std::vector<std::string> pending_;
  std::shared_ptr<ResponseChannel> ch_;
  const ModelBinding& m_;
  Metrics& metrics_;
  bool chat_, stream_;
  int64_t cached_tokens_ = 0;  // summed over the job's parts (usage.prompt_tokens_details.cached_tokens)
  std::string id_;
  int64_t created_;
  size_t done_count_ = 0;
  bool finished_ = false, aborted_ = false;
};

// The scheduler's view of one prompt of a job: choice c of this part is the job's choice offset + c.
class Part final : public SchedRequest {
 public:
  Part(std::shared_ptr<Job> job, int offset) : job_(std::move(job)), offset_(offset) {}
  bool on_token(int c, const runtime::SampledToken& t) override;
  void on_choice_done(int c, FinishReason r) override { job_->on_choice_done(offset_ + c, r); }
  void on_error(int status, const std::string& code, const std::string& msg) override {
    job_->on_error(status, code, msg);
  }
  void constrain(int c, runtime::SamplePlan& plan) override;
  void prepare_constraint(int c) override;
  void on_prompt_logprob(const runtime::SampledToken& t) override { job_->on_prompt_logprob(offset_, n, t); }
  void on_prompt_cached(int64_t tokens) override { job_->on_prompt_cached(tokens); }

  // Structured outputs: one constraint per choice of this part (empty: unconstrained).
  std::vector<std::unique_ptr<ChoiceConstraint>> constraints;

 private:
  std::shared_ptr<Job> job_;
  int offset_;
};

// Gives each of the part's n choices its own constraint over `g` (nothing when g is null), stopping on the
// part's stop ids; wait_for: see ChoiceConstraint. Call after fill_sched_request.
void attach_constraints(Part& part, const std::shared_ptr<CompiledGrammar>& g, int32_t wait_for);

}  // namespace gridq::serve

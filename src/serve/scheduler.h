// Continuous batching (api.md §8). One thread runs steps: at each step boundary it drops cancelled
// sequences, admits waiting requests FIFO while sequence slots and free KV pages allow, then runs one
// forward holding every decoding sequence (one token each) plus prefill chunks under a token budget, samples
// each sequence with its own seeded sampler, and reports tokens through the request's callbacks.
//
// KV (docs/serving.md "KV cache"): pages are asked of the engine (EngineIface::kv_pages). A request that can
// never fit (n × pages for prompt + max_tokens beyond the whole pool) is refused at submit; one that fits
// waits FIFO until the pages for its prompts are free. Sequences take pages as they grow; when a step's
// sequences need more pages than are free, the newest running request is preempted: its KV is dropped and
// it goes back to the front of the queue, to recompute prompt + tokens generated so far when readmitted
// (vLLM's recompute preemption); its streams just continue. With prefix caching each sequence first takes
// the cached pages of its context (attach_prefix), and choices 1..n-1 of a request wait for choice 0 to
// prefill the prompt so they share its pages.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/sampler.h"
#include "serve/engine_iface.h"
#include "serve/metrics.h"

namespace gridq::serve {

enum class FinishReason { kStop, kLength, kAbort };

// One API request as the scheduler sees it. The HTTP layer fills the fields and implements the callbacks,
// which run on the scheduler thread and must not block.
class SchedRequest {
 public:
  virtual ~SchedRequest() = default;
  // A sampled token of `choice` (not a stop id). Return true when a stop string ended the choice.
  virtual bool on_token(int choice, const runtime::SampledToken& tok) = 0;
  virtual void on_choice_done(int choice, FinishReason reason) = 0;
  // The request failed as a whole (engine error, queue timeout); no further callbacks follow.
  virtual void on_error(int http_status, const std::string& code, const std::string& message) = 0;
  // Prompt scoring (completions echo + logprobs): with prompt_logprobs set, choice 0's prefill returns the
  // raw logprob of each prompt token after the first, in order, here (SampledToken::token is that prompt
  // token, `top` its alternatives). Default: unused.
  virtual void on_prompt_logprob(const runtime::SampledToken& /*tok*/) {}
  // With prefix caching: how many prompt positions choice 0 did not have to run (PrefixHit::resume: the
  // cached positions less those run again to rebuild sliding-window rings), once, at its first lookup.
  // Default: unused.
  virtual void on_prompt_cached(int64_t /*tokens*/) {}
  // Structured outputs (serve/constraint.h): called on the scheduler thread with each sampled row's plan of
  // `choice` before the step runs, to restrict it (SamplePlan::allowed). Default: unconstrained.
  virtual void constrain(int /*choice*/, runtime::SamplePlan& /*plan*/) {}
  // Called for each such row before constrain() and before the step's forward: may start computing the
  // row's restriction on another thread (ChoiceConstraint::prepare), which constrain() then waits for; the
  // scheduler calls constrain() after the forward when the engine samples on the host, so the two overlap.
  virtual void prepare_constraint(int /*choice*/) {}

  std::vector<int32_t> prompt;
  int n = 1;
  int64_t max_tokens = 16;
  std::vector<runtime::SamplingParams> sampling;  // one per choice (serve/sampling.h)
  std::vector<int32_t> stop_ids;  // EOS (unless ignore_eos), </assistant> for chat, stop_token_ids
  int64_t min_tokens = 0;
  int top_logprobs = 0;
  bool prompt_logprobs = false;  // see on_prompt_logprob; max_tokens may then be 0 (scoring only)
  std::atomic<bool> cancelled{false};
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

struct SchedulerStats {
  int64_t preemptions = 0;                      // requests preempted (vLLM's num_preemptions)
  int64_t prefix_queries = 0, prefix_hits = 0;  // tokens looked up in / found in the prefix cache
  int64_t prefix_recomputed = 0;                // cached tokens run again to rebuild sliding-window rings
};

struct SchedulerOptions {
  int max_num_seqs = 32;
  int64_t max_batch_tokens = 512;  // per-step token budget (decode tokens + prefill chunks)
  size_t max_queue = 256;
  double queue_timeout_s = 0.0;  // 0 = wait forever
};

struct SubmitError {
  int status;
  std::string code;
  std::string message;
};

class Scheduler {
 public:
  Scheduler(EngineIface& engine, SchedulerOptions opts, Metrics* metrics);
  ~Scheduler();
  void start();
  // Aborts everything still queued or running and joins the thread.
  void stop();
  // The same, but gives up waiting at `deadline` (an engine step can take long on a loaded machine): false
  // when the thread is still inside a step; the caller must then not destroy the engine (it exits instead).
  bool stop_within(std::chrono::steady_clock::time_point deadline);

  std::optional<SubmitError> submit(std::shared_ptr<SchedRequest> req);
  // Every queued and running request ends with FinishReason::kAbort at the next step boundary.
  void abort_all();
  int64_t num_running_requests() const { return running_reqs_.load(); }
  int64_t num_waiting_requests() const { return waiting_reqs_.load(); }
  bool idle() const { return running_reqs_.load() == 0 && waiting_reqs_.load() == 0; }
  bool failed() const { return failed_.load(); }
  std::string failure() const;
  // Waits until the scheduler has nothing queued or running, or the deadline passes. True if idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  const SchedulerOptions& options() const { return opts_; }
  SchedulerStats stats() const;

 private:
  struct Seq {
    SeqId id = 0;
    std::shared_ptr<SchedRequest> req;
    int choice = 0;
    runtime::Sampler sampler;
    std::vector<int32_t> resume;  // after a preemption: prompt + generated, the context to recompute
    size_t prefilled = 0;         // positions of ctx() in the engine's KV
    int64_t len = 0;              // positions in the engine's KV (prefilled, then + decoded)
    bool attached = false;        // the prefix cache was consulted (before the first prefill chunk)
    std::vector<int32_t> generated;
    int32_t next_input = -1;
    bool done = false;
    std::chrono::steady_clock::time_point last_token;
    size_t scored = 0;  // prompt scoring: prompt positions whose next token's logprob was reported
    // The tokens the KV must hold before the next sampled row.
    std::span<const int32_t> ctx() const {
      return resume.empty() ? std::span<const int32_t>(req->prompt) : std::span<const int32_t>(resume);
    }
    bool prefilling() const { return prefilled < ctx().size(); }
    // Whether this sequence's prefill still reports prompt logprobs (choice 0 only: the prompt is shared).
    bool scoring() const { return req->prompt_logprobs && choice == 0 && scored + 1 < req->prompt.size(); }
  };
  struct ReqState {
    std::shared_ptr<SchedRequest> req;
    int remaining = 0;
    int64_t generated = 0;
    std::chrono::steady_clock::time_point admitted, first_token, prefill_done;
    bool got_first = false;
    bool queued = false;                       // preempted and back in the queue (not running)
    std::vector<std::unique_ptr<Seq>> parked;  // then: its unfinished choices
  };

  void loop();
  void admit_locked();
  // Builds the step's items; preempts the newest requests until the pages they need are free.
  void build_step(std::vector<StepItem>& items, std::vector<Seq*>& owners);
  void collect_items(std::vector<StepItem>& items, std::vector<Seq*>& owners);
  // The plan that scores prompt position `pos` of `s` (only ctx[pos + 1] allowed, greedy), kept in `store`.
  static const runtime::SamplePlan* score_plan(const Seq& s, size_t pos, size_t V,
                                               std::deque<runtime::SamplePlan>& store);
  void preempt(const SchedRequest* victim);
  void finish_seq(Seq& s, FinishReason r);
  void drop_request(const std::shared_ptr<SchedRequest>& r);
  void fail_all(const std::string& message);
  void update_gauges();
  ReqState* state_of(const SchedRequest* r);
  int64_t pages_for(int64_t tokens) const;

  EngineIface& engine_;
  SchedulerOptions opts_;
  Metrics* metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::shared_ptr<SchedRequest>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // admission order
  std::vector<ReqState> reqs_;
  std::thread thread_;
  bool stop_ = false;
  // Requests just taken off the queue (aborted, timed out) whose callbacks have not run yet: not idle.
  bool settling_ = false;
  bool exited_ = false;  // the loop has returned (stop_within)
  std::atomic<bool> abort_flag_{false};
  std::atomic<bool> failed_{false};
  std::string failure_;
  std::atomic<int64_t> running_reqs_{0}, waiting_reqs_{0};
  // Sequence slots not taken by running sequences, as of the last admission or step (scheduler thread).
  std::atomic<int64_t> free_slots_{0};
  runtime::KvPageStats kv0_;  // the pool at construction (total and page size do not change)
  SchedulerStats stats_;      // under mu_
  SeqId next_seq_ = 1;
};

}  // namespace gridq::serve

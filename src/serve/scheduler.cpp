#include "serve/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "serve/logit_check.h"

namespace gridq::serve {

using Clock = std::chrono::steady_clock;

namespace {
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

Scheduler::Scheduler(EngineIface& engine, SchedulerOptions opts, Metrics* metrics)
    : engine_(engine),
      opts_(opts),
      metrics_(metrics),
      free_slots_(opts.max_num_seqs),
      kv0_(engine.kv_pages()) {}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() {
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    abort_flag_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Scheduler::stop_within(Clock::time_point deadline) {
  {
    std::unique_lock lk(mu_);
    stop_ = true;
    abort_flag_ = true;
    cv_.notify_all();
    if (thread_.joinable() && !idle_cv_.wait_until(lk, deadline, [&] { return exited_; })) return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

std::string Scheduler::failure() const {
  std::lock_guard lk(mu_);
  return failure_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

int64_t Scheduler::pages_for(int64_t tokens) const {
  const int64_t pt = std::max(1, kv0_.page_tokens);
  return (std::max<int64_t>(tokens, 0) + pt - 1) / pt;
}

std::optional<SubmitError> Scheduler::submit(std::shared_ptr<SchedRequest> req) {
  {
    std::lock_guard lk(mu_);
    if (failed_) return SubmitError{503, "engine_failed", "the engine failed: " + failure_};
    if (stop_) return SubmitError{503, "shutting_down", "the server is shutting down"};
    if (req->n > opts_.max_num_seqs) return SubmitError{400, "invalid_value", "n exceeds --max-num-seqs"};
    // --max-queue bounds the requests that must wait, not those arriving before the scheduler thread's next
    // step boundary: a burst first fills the free sequence slots (issue 14 item 9), so the waiting requests
    // that those slots will take at the next admission do not count against the queue.
    int64_t slots = free_slots_.load();
    size_t must_wait = 0;
    for (const auto& w : waiting_) {
      if (must_wait == 0 && slots >= w->n)
        slots -= w->n;
      else
        ++must_wait;
    }
    if ((must_wait > 0 || slots < req->n) && must_wait >= opts_.max_queue)
      return SubmitError{429, "queue_full", "the waiting queue is full; retry later"};
    const int64_t prompt = static_cast<int64_t>(req->prompt.size()), L = engine_.max_model_len();
    if (prompt + 1 > L)
      return SubmitError{
          400, "context_length_exceeded",
          fmt::format("the prompt has {} tokens; --max-model-len {} leaves no room for a completion", prompt,
                      L)};
    // Never fits: its choices at their longest need more pages than the whole cache (sharing ignored).
    if (kv0_.total >= 0) {
      const int64_t tokens = std::min(prompt + std::max<int64_t>(req->max_tokens, 1), L);
      const int64_t need = req->n * pages_for(tokens);
      if (need > kv0_.total)
        return SubmitError{
            400, "kv_cache_too_small",
            fmt::format(
                "the request needs {} KV pages ({} choice(s) × {} tokens: prompt {} + max_tokens {}, "
                "{} tokens per page) but the whole KV cache holds {} pages ({} tokens); lower max_tokens "
                "or n, or raise --num-gpu-blocks-override / --gpu-memory-utilization",
                need, req->n, tokens, prompt, req->max_tokens, kv0_.page_tokens, kv0_.total,
                kv0_.total * kv0_.page_tokens)};
    }
    req->arrival = Clock::now();
    waiting_.push_back(std::move(req));
    waiting_reqs_ = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
  return std::nullopt;
}

void Scheduler::abort_all() {
  abort_flag_ = true;
  cv_.notify_all();
}

bool Scheduler::wait_idle(Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_until(lk, deadline,
                             [&] { return running_reqs_.load() == 0 && waiting_.empty() && !settling_; });
}

Scheduler::ReqState* Scheduler::state_of(const SchedRequest* r) {
  for (auto& s : reqs_)
    if (s.req.get() == r) return &s;
  return nullptr;
}

void Scheduler::admit_locked() {
  int64_t running_seqs = 0, pending = 0;
  // Pages the admitted sequences still need to finish their prefill (and sample once).
  for (const auto& s : running_) {
    if (s->done) continue;
    ++running_seqs;
    if (s->prefilling()) pending += engine_.kv_pages_needed(s->id, static_cast<int64_t>(s->ctx().size()) + 1);
  }
  const runtime::KvPageStats kv = engine_.kv_pages();
  while (!waiting_.empty()) {
    auto req = waiting_.front();
    ReqState* parked = state_of(req.get());  // preempted earlier: its unfinished choices resume
    std::vector<std::unique_ptr<Seq>> seqs;
    if (parked) {
      seqs = std::move(parked->parked);
      parked->queued = false;
    } else {
      for (int c = 0; c < req->n; ++c)
        seqs.push_back(std::make_unique<Seq>(
            Seq{0, req, c, runtime::Sampler(req->sampling[c]), {}, 0, 0, false, {}, -1, false, {}, 0}));
    }
    int64_t need = 0;
    for (const auto& s : seqs) need += pages_for(static_cast<int64_t>(s->ctx().size()) + 1);
    const bool fits = kv.total < 0 || pending + need <= kv.free() || running_seqs == 0;
    bool ok = fits && running_seqs + static_cast<int64_t>(seqs.size()) <= opts_.max_num_seqs;
    size_t added = 0;
    while (ok && added < seqs.size()) {
      seqs[added]->id = next_seq_++;
      if (!engine_.add_sequence(seqs[added]->id).ok())
        ok = false;
      else
        ++added;
    }
    if (!ok) {
      for (size_t i = 0; i < added; ++i) engine_.remove_sequence(seqs[i]->id);
      if (parked) {
        parked->parked = std::move(seqs);
        parked->queued = true;
      }
      break;
    }
    if (!parked) {
      ReqState st;
      st.req = req;
      st.remaining = req->n;
      st.admitted = Clock::now();
      if (metrics_) metrics_->observe(Hist::kQueue, secs(st.admitted - req->arrival));
      reqs_.push_back(std::move(st));
    }
    pending += need;
    running_seqs += static_cast<int64_t>(seqs.size());
    for (auto& s : seqs) running_.push_back(std::move(s));
    ++running_reqs_;
    waiting_.pop_front();
  }
  waiting_reqs_ = static_cast<int64_t>(waiting_.size());
  free_slots_ = opts_.max_num_seqs - running_seqs;
}

void Scheduler::finish_seq(Seq& s, FinishReason r) {
  if (s.done) return;
  s.done = true;
  engine_.remove_sequence(s.id);
  s.req->on_choice_done(s.choice, r);
  ReqState* st = state_of(s.req.get());
  if (!st) return;
  if (r == FinishReason::kAbort && metrics_ && st->remaining == st->req->n) metrics_->request_aborted();
  if (--st->remaining > 0) return;
  const auto now = Clock::now();
  if (metrics_ && r != FinishReason::kAbort) {
    metrics_->observe(Hist::kE2e, secs(now - st->req->arrival));
    metrics_->observe(Hist::kPromptTokens, static_cast<double>(st->req->prompt.size()));
    metrics_->observe(Hist::kGenTokens, static_cast<double>(st->generated));
    if (st->got_first) metrics_->observe(Hist::kDecode, secs(now - st->first_token));
  }
  if (!st->queued) --running_reqs_;
  const SchedRequest* key = st->req.get();
  reqs_.erase(
      std::remove_if(reqs_.begin(), reqs_.end(), [&](const ReqState& x) { return x.req.get() == key; }),
      reqs_.end());
}

void Scheduler::drop_request(const std::shared_ptr<SchedRequest>& r) {
  ReqState* st = state_of(r.get());
  if (!st) {  // never admitted: every choice ends here
    for (int c = 0; c < r->n; ++c) r->on_choice_done(c, FinishReason::kAbort);
    if (metrics_) metrics_->request_aborted();
    return;
  }
  // Preempted and queued again: its unfinished choices end (finish_seq erases the state with the last).
  auto parked = std::move(st->parked);
  for (auto& s : parked) finish_seq(*s, FinishReason::kAbort);
}

void Scheduler::preempt(const SchedRequest* victim) {
  ReqState* st = state_of(victim);
  if (!st) return;
  for (auto& s : running_) {
    if (s->req.get() != victim || s->done) continue;
    engine_.remove_sequence(s->id);
    // Recompute prompt + generated when readmitted; the last generated token is the next input no more,
    // its logits come from the recomputed context instead.
    if (!s->generated.empty()) {
      s->resume.assign(s->req->prompt.begin(), s->req->prompt.end());
      s->resume.insert(s->resume.end(), s->generated.begin(), s->generated.end());
    }
    s->prefilled = 0;
    s->len = 0;
    s->attached = false;
    st->parked.push_back(std::move(s));
  }
  std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return !s; });
  st->queued = true;
  --running_reqs_;
  std::lock_guard lk(mu_);
  waiting_.push_front(st->req);
  waiting_reqs_ = static_cast<int64_t>(waiting_.size());
  ++stats_.preemptions;
  if (metrics_) metrics_->add_preemptions(1);
}

void Scheduler::fail_all(const std::string& message) {
  std::deque<std::shared_ptr<SchedRequest>> waiting;
  {
    std::lock_guard lk(mu_);
    failed_ = true;
    failure_ = message;
    waiting.swap(waiting_);
    waiting_reqs_ = 0;
  }
  std::vector<std::shared_ptr<SchedRequest>> reqs;
  for (auto& s : running_) {
    engine_.remove_sequence(s->id);
    if (std::find(reqs.begin(), reqs.end(), s->req) == reqs.end()) reqs.push_back(s->req);
  }
  running_.clear();
  reqs_.clear();  // preempted requests among them are in `waiting`
  running_reqs_ = 0;
  for (auto& r : reqs) r->on_error(503, "engine_failed", "the engine failed: " + message);
  for (auto& r : waiting) r->on_error(503, "engine_failed", "the engine failed: " + message);
}

void Scheduler::update_gauges() {
  int64_t seqs = 0;
  for (const auto& s : running_)
    if (s && !s->done) ++seqs;
  free_slots_ = opts_.max_num_seqs - seqs;
  if (!metrics_) return;
  const runtime::KvPageStats kv = engine_.kv_pages();
  metrics_->set_gauges(running_reqs_.load(), waiting_reqs_.load(),
                       kv.total > 0 ? static_cast<double>(kv.used) / static_cast<double>(kv.total) : 0.0);
  metrics_->set_kv_pages(kv.total, kv.used, kv.cached);
}

}  // namespace gridq::serve

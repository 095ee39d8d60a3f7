#include "serve/scheduler.h"

#include <algorithm>

#include "serve/logit_check.h"

namespace gridq::serve {

using Clock = std::chrono::steady_clock;

namespace {
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

Scheduler::Scheduler(EngineIface& engine, SchedulerOptions opts, Metrics* metrics)
    : engine_(engine), opts_(opts), metrics_(metrics) {}

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

std::optional<SubmitError> Scheduler::submit(std::shared_ptr<SchedRequest> req) {
  {
    std::lock_guard lk(mu_);
    if (failed_) return SubmitError{503, "engine_failed", "the engine failed: " + failure_};
    if (stop_) return SubmitError{503, "shutting_down", "the server is shutting down"};
    if (waiting_.size() >= opts_.max_queue)
      return SubmitError{429, "queue_full", "the waiting queue is full; retry later"};
    if (req->n > opts_.max_num_seqs) return SubmitError{400, "invalid_value", "n exceeds --max-num-seqs"};
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
  int64_t running_seqs = 0;
  for (const auto& s : running_)
    if (!s->done) ++running_seqs;
  const int64_t cap = engine_.kv_capacity_tokens();
  while (!waiting_.empty()) {
    auto& req = waiting_.front();
    const int64_t need = req->n * (static_cast<int64_t>(req->prompt.size()) + req->max_tokens);
    if (running_seqs + req->n > opts_.max_num_seqs) break;
    if (kv_reserved_ + need > cap && !(kv_reserved_ == 0)) break;
    ReqState st;
    st.req = req;
    st.remaining = req->n;
    st.reserved = need;
    st.admitted = Clock::now();
    bool ok = true;
    std::vector<std::unique_ptr<Seq>> seqs;
    for (int c = 0; c < req->n; ++c) {
      auto s = std::make_unique<Seq>(
          Seq{next_seq_++, req, c, runtime::Sampler(req->sampling[c]), 0, {}, -1, false, {}});
      if (!engine_.add_sequence(s->id).ok()) {
        ok = false;
        break;
      }
      seqs.push_back(std::move(s));
    }
    if (!ok) {
      for (auto& s : seqs) engine_.remove_sequence(s->id);
      break;
    }
    kv_reserved_ += need;
    running_seqs += req->n;
    if (metrics_) metrics_->observe(Hist::kQueue, secs(st.admitted - req->arrival));
    for (auto& s : seqs) running_.push_back(std::move(s));
    reqs_.push_back(std::move(st));
    ++running_reqs_;
    waiting_.pop_front();
  }
  waiting_reqs_ = static_cast<int64_t>(waiting_.size());
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
  kv_reserved_ -= st->reserved;
  const SchedRequest* key = st->req.get();
  reqs_.erase(
      std::remove_if(reqs_.begin(), reqs_.end(), [&](const ReqState& x) { return x.req.get() == key; }),
      reqs_.end());
  --running_reqs_;
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
  reqs_.clear();
  kv_reserved_ = 0;
  running_reqs_ = 0;
  for (auto& r : reqs) r->on_error(503, "engine_failed", "the engine failed: " + message);
  for (auto& r : waiting) r->on_error(503, "engine_failed", "the engine failed: " + message);
}

void Scheduler::update_gauges() {
  if (!metrics_) return;
  const int64_t cap = std::max<int64_t>(1, engine_.kv_capacity_tokens());
  metrics_->set_gauges(running_reqs_.load(), waiting_reqs_.load(),
                       static_cast<double>(engine_.kv_used_tokens()) / static_cast<double>(cap));
}

void Scheduler::loop() {
  std::vector<runtime::SampledToken> sampled;
  for (;;) {
    std::vector<std::shared_ptr<SchedRequest>> aborted, timed_out;
    bool abort_running = false;
    {
      std::unique_lock lk(mu_);
      auto has_work = [&] { return stop_ || abort_flag_ || !waiting_.empty() || !running_.empty(); };
      if (!has_work()) {
        idle_cv_.notify_all();
        cv_.wait(lk, has_work);
      }
      if (abort_flag_.exchange(false)) {
        abort_running = true;
        aborted.assign(waiting_.begin(), waiting_.end());
        waiting_.clear();
      }
      // Cancelled or expired waiting requests leave the queue without touching the engine.
      const auto now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->cancelled) {
          aborted.push_back(*it);
          it = waiting_.erase(it);
        } else if (opts_.queue_timeout_s > 0 && secs(now - (*it)->arrival) > opts_.queue_timeout_s) {
          timed_out.push_back(*it);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      if (!abort_running && !failed_) admit_locked();
      waiting_reqs_ = static_cast<int64_t>(waiting_.size());
      settling_ = !aborted.empty() || !timed_out.empty();
    }
    for (auto& r : aborted) {
      if (metrics_) metrics_->request_aborted();
      for (int c = 0; c < r->n; ++c) r->on_choice_done(c, FinishReason::kAbort);
    }
    for (auto& r : timed_out)
      r->on_error(503, "queue_timeout", "the request waited in the queue longer than --queue-timeout");
    if (!aborted.empty() || !timed_out.empty()) {
      std::lock_guard lk(mu_);
      settling_ = false;
    }
    for (auto& s : running_)
      if (abort_running || s->req->cancelled) finish_seq(*s, FinishReason::kAbort);
    std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    update_gauges();
    {
      std::unique_lock lk(mu_);
      if (stop_ && running_.empty() && waiting_.empty()) {
        exited_ = true;
        idle_cv_.notify_all();
        return;
      }
      if (running_.empty()) {
        idle_cv_.notify_all();
        // Nothing runnable although requests wait (admission failed): retry after a short pause.
        if (!waiting_.empty()) cv_.wait_for(lk, std::chrono::milliseconds(10));
        continue;
      }
    }

    // Build one step: every decoding sequence contributes its last token, prefills fill the rest of the
    // budget.
    std::vector<StepItem> items;
    std::vector<Seq*> owners;
    int64_t budget = opts_.max_batch_tokens;
    for (auto& s : running_) {
      if (s->prefilled < s->req->prompt.size()) continue;
      items.push_back(StepItem{s->id, std::span<const int32_t>(&s->next_input, 1), true});
      owners.push_back(s.get());
      --budget;
    }
    for (auto& s : running_) {
      const size_t left = s->req->prompt.size() - s->prefilled;
      if (left == 0) continue;
      if (budget <= 0 && !items.empty()) break;
      const size_t n = std::min<size_t>(left, static_cast<size_t>(std::max<int64_t>(budget, 1)));
      items.push_back(StepItem{s->id, std::span<const int32_t>(s->req->prompt.data() + s->prefilled, n),
                               s->prefilled + n == s->req->prompt.size()});
      owners.push_back(s.get());
      budget -= static_cast<int64_t>(n);
    }
    // Each sampled row's plan (its uniform drawn now, in row order) before the step, so the engine can
    // sample where the logits are; rows of finished or cancelled sequences are not sampled.
    std::vector<runtime::SamplePlan> plan_store;
    plan_store.reserve(items.size());
    std::vector<const runtime::SamplePlan*> plans;
    const size_t V = static_cast<size_t>(engine_.vocab_size());
    for (size_t k = 0; k < items.size(); ++k) {
      if (!items[k].want_logits) continue;
      Seq& s = *owners[k];
      if (s.done || s.req->cancelled) {
        plans.push_back(nullptr);
        continue;
      }
      std::span<const int32_t> banned;
      if (static_cast<int64_t>(s.generated.size()) < s.req->min_tokens) banned = s.req->stop_ids;
      plan_store.push_back(s.sampler.plan(V, s.req->prompt, s.generated, banned, s.req->top_logprobs));
      s.req->constrain(s.choice, plan_store.back());
      plans.push_back(&plan_store.back());
    }
    sampled.clear();
    Status st = engine_.forward_sampled(items, plans, sampled);
    if (st.ok() && sampled.size() != plans.size())
      st = err("engine returned {} tokens for {} rows", sampled.size(), plans.size());
    if (!st.ok()) {
      fail_all(st.message());
      update_gauges();
      continue;
    }
    const auto now = Clock::now();
    size_t row = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      Seq& s = *owners[k];
      const bool prefill = s.prefilled < s.req->prompt.size();
      if (prefill) {
        s.prefilled += items[k].tokens.size();
        if (s.prefilled == s.req->prompt.size()) {
          if (metrics_) metrics_->add_prompt_tokens(static_cast<int64_t>(s.req->prompt.size()));
          if (ReqState* rs = state_of(s.req.get()); rs && metrics_)
            metrics_->observe(Hist::kPrefill, secs(now - rs->admitted));
        }
      }
      if (!items[k].want_logits) continue;
      const runtime::SampledToken& tok = sampled[row];
      if (!plans[row++] || s.done || s.req->cancelled) continue;
      if (fail_on_non_finite(tok, *s.req)) continue;
      const auto& stop_ids = s.req->stop_ids;
      ReqState* rs = state_of(s.req.get());
      if (rs) {
        ++rs->generated;
        if (!rs->got_first) {
          rs->got_first = true;
          rs->first_token = now;
          if (metrics_) metrics_->observe(Hist::kTtft, secs(now - s.req->arrival));
        } else if (metrics_ && !s.generated.empty()) {
          metrics_->observe(Hist::kItl, secs(now - s.last_token));
        }
      }
      s.last_token = now;
      if (std::find(stop_ids.begin(), stop_ids.end(), tok.token) != stop_ids.end()) {
        finish_seq(s, FinishReason::kStop);
        continue;
      }
      if (metrics_) metrics_->add_generation_tokens(1);
      s.generated.push_back(tok.token);
      if (s.req->on_token(s.choice, tok)) {
        finish_seq(s, FinishReason::kStop);
        continue;
      }
      if (static_cast<int64_t>(s.generated.size()) >= s.req->max_tokens ||
          static_cast<int64_t>(s.req->prompt.size() + s.generated.size()) >= engine_.max_model_len()) {
        finish_seq(s, FinishReason::kLength);
        continue;
      }
      s.next_input = tok.token;
    }
    std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    update_gauges();
  }
}

}  // namespace gridq::serve

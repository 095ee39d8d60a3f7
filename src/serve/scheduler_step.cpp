// The scheduler thread (scheduler.h): step boundaries (cancellation, timeouts, admission), building a step
// under the token budget and the free KV pages (preempting the newest requests when they run short), the
// forward, and each sampled token's way to its request.
#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "serve/logit_check.h"
#include "serve/scheduler.h"

namespace gridq::serve {

using Clock = std::chrono::steady_clock;

namespace {
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

const runtime::SamplePlan* Scheduler::score_plan(const Seq& s, size_t pos, size_t V,
                                                 std::deque<runtime::SamplePlan>& store) {
  runtime::SamplePlan p;
  p.greedy = true;
  p.top_logprobs = s.req->top_logprobs;
  const auto next = static_cast<size_t>(s.ctx()[pos + 1]);
  p.allowed.assign((V + 63) / 64, 0);
  if (next < V) p.allowed[next >> 6] |= uint64_t{1} << (next & 63);
  store.push_back(std::move(p));
  return &store.back();
}

void Scheduler::collect_items(std::vector<StepItem>& items, std::vector<Seq*>& owners) {
  // Every decoding sequence contributes its last token; prefill chunks fill the rest of the budget.
  int64_t budget = opts_.max_batch_tokens;
  for (auto& s : running_) {
    if (s->done || s->prefilling()) continue;
    items.push_back(StepItem{s->id, std::span<const int32_t>(&s->next_input, 1), true, false});
    owners.push_back(s.get());
    --budget;
  }
  for (auto& s : running_) {
    if (s->done || !s->prefilling()) continue;
    if (budget <= 0 && !items.empty()) break;
    if (!s->attached) {
      if (engine_.prefix_caching() && s->choice > 0) {
        // Choice 0 of the same request prefills the prompt first; the others then share its pages.
        auto first = std::find_if(running_.begin(), running_.end(), [&](const std::unique_ptr<Seq>& o) {
          return o->req == s->req && o->choice == 0 && !o->done;
        });
        if (first != running_.end() && (*first)->prefilled < s->req->prompt.size()) continue;
      }
      s->attached = true;
      // A scored prompt is prefilled whole: cached pages would skip the positions whose logprobs it needs.
      if (engine_.prefix_caching() && !s->scoring()) {
        auto hit = engine_.attach_prefix(s->id, s->ctx());
        if (hit.ok()) {
          s->prefilled = static_cast<size_t>(hit->resume);
          s->len = hit->resume;
          if (s->choice == 0 && s->resume.empty()) s->req->on_prompt_cached(hit->resume);
          std::lock_guard lk(mu_);
          stats_.prefix_queries += static_cast<int64_t>(s->ctx().size());
          stats_.prefix_hits += hit->cached;
          stats_.prefix_recomputed += hit->cached - hit->resume;
          if (metrics_)
            metrics_->add_prefix_cache(static_cast<int64_t>(s->ctx().size()), hit->cached,
                                       hit->cached - hit->resume);
        }
        // A refused lookup (it cannot happen on an empty sequence) just prefills everything.
      }
    }
    const auto ctx = s->ctx();
    const size_t n =
        std::min<size_t>(ctx.size() - s->prefilled, static_cast<size_t>(std::max<int64_t>(budget, 1)));
    const bool score = s->scoring();
    items.push_back(
        StepItem{s->id, ctx.subspan(s->prefilled, n), score || s->prefilled + n == ctx.size(), score});
    owners.push_back(s.get());
    budget -= static_cast<int64_t>(n);
  }
}

void Scheduler::build_step(std::vector<StepItem>& items, std::vector<Seq*>& owners) {
  for (;;) {
    items.clear();
    owners.clear();
    collect_items(items, owners);
    const runtime::KvPageStats kv = engine_.kv_pages();
    if (kv.total < 0 || items.empty()) return;
    int64_t need = 0;
    for (size_t k = 0; k < items.size(); ++k)
      need += engine_.kv_pages_needed(items[k].seq,
                                      owners[k]->len + static_cast<int64_t>(items[k].tokens.size()));
    if (need <= kv.free()) return;
    // Preempt the newest request (the last admitted); the oldest keep their pages and progress.
    const SchedRequest* victim = nullptr;
    bool others = false;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if ((*it)->done) continue;
      if (!victim)
        victim = (*it)->req.get();
      else if ((*it)->req.get() != victim)
        others = true;
    }
    if (!victim) return;
    if (!others) {
      // Alone and still short: submit() refuses any request that cannot fit an empty cache, so only an
      // engine that reports fewer pages than it started with gets here. Fail the request, not the server.
      auto req = running_.back()->req;
      for (auto& s : running_)
        if (s->req == req && !s->done) {
          s->done = true;
          engine_.remove_sequence(s->id);
        }
      req->on_error(503, "kv_cache_exhausted",
                    fmt::format("the KV cache cannot hold this request: its next step needs {} new pages, {} "
                                "of {} are free",
                                need, kv.free(), kv.total));
      const SchedRequest* key = req.get();
      if (ReqState* st = state_of(key); st && !st->queued) --running_reqs_;
      std::erase_if(reqs_, [&](const ReqState& x) { return x.req.get() == key; });
      std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
      continue;
    }
    preempt(victim);
  }
}

void Scheduler::loop() {
  std::vector<runtime::SampledToken> sampled;
  std::vector<float> logits;
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
      // Cancelled or expired waiting requests leave the queue without touching the engine. A preempted
      // request is not timed out: it was admitted, and its stream is running.
      const auto now = Clock::now();
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->cancelled) {
          aborted.push_back(*it);
          it = waiting_.erase(it);
        } else if (opts_.queue_timeout_s > 0 && secs(now - (*it)->arrival) > opts_.queue_timeout_s &&
                   !state_of(it->get())) {
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
    for (auto& r : aborted) drop_request(r);
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

    std::vector<StepItem> items;
    std::vector<Seq*> owners;
    const auto step_start = Clock::now();
    build_step(items, owners);
    if (items.empty()) {
      update_gauges();
      continue;
    }
    const bool decode_only =
        std::none_of(owners.begin(), owners.end(), [](const Seq* s) { return s->prefilling(); });
    // Each sampled row's plan (its uniform drawn now, in row order) before the step, so the engine can
    // sample where the logits are; rows of finished or cancelled sequences are not sampled.
    std::deque<runtime::SamplePlan> plan_store;  // stable addresses as it grows
    std::vector<const runtime::SamplePlan*> plans;
    std::vector<std::pair<Seq*, runtime::SamplePlan*>> sampled_rows;  // rows constrain() is called for
    const size_t V = static_cast<size_t>(engine_.vocab_size());
    for (size_t k = 0; k < items.size(); ++k) {
      if (!items[k].want_logits) continue;
      Seq& s = *owners[k];
      const size_t rows = items[k].all_logits ? items[k].tokens.size() : 1;
      if (s.done || s.req->cancelled) {
        plans.insert(plans.end(), rows, nullptr);
        continue;
      }
      // Prompt scoring: the row of prompt position p is "sampled" with only prompt[p + 1] allowed, greedily,
      // which reports that token's raw logprob and alternatives (runtime/sampler.h step 8) and leaves every
      // sampling state untouched. The row of the prompt's last position, if in this chunk, samples as usual.
      const size_t base = s.prefilled;
      for (size_t j = 0; j + 1 < rows; ++j) plans.push_back(score_plan(s, base + j, V, plan_store));
      if (items[k].all_logits && base + rows < s.ctx().size()) {
        plans.push_back(score_plan(s, base + rows - 1, V, plan_store));
        continue;
      }
      std::span<const int32_t> banned;
      if (static_cast<int64_t>(s.generated.size()) < s.req->min_tokens) banned = s.req->stop_ids;
      plan_store.push_back(s.sampler.plan(V, s.req->prompt, s.generated, banned, s.req->top_logprobs));
      s.req->prepare_constraint(s.choice);
      sampled_rows.emplace_back(&s, &plan_store.back());
      plans.push_back(&plan_store.back());
    }
    sampled.clear();
    Status st;
    const auto forward_start = Clock::now();
    if (engine_.samples_on_host()) {
      // The forward runs while the workers compute the rows' masks (prepare_constraint); the rows are then
      // restricted and sampled here exactly as the engine's forward_sampled would (engine_iface.h).
      logits.clear();
      st = engine_.forward(items, logits);
      for (auto& [s, plan] : sampled_rows) s->req->constrain(s->choice, *plan);
      if (st.ok() && logits.size() != plans.size() * V)
        st = err("engine returned {} logits for {} rows of vocab {}", logits.size(), plans.size(), V);
      if (st.ok()) sampled = runtime::sample_rows(logits, V, plans);
    } else {
      for (auto& [s, plan] : sampled_rows) s->req->constrain(s->choice, *plan);
      st = engine_.forward_sampled(items, plans, sampled);
    }
    if (st.ok() && sampled.size() != plans.size())
      st = err("engine returned {} tokens for {} rows", sampled.size(), plans.size());
    if (!st.ok()) {
      fail_all(st.message());
      update_gauges();
      continue;
    }
    const auto now = Clock::now();
    const double forward_secs = secs(now - forward_start);
    size_t row = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      Seq& s = *owners[k];
      s.len += static_cast<int64_t>(items[k].tokens.size());
      if (s.prefilling()) {
        s.prefilled += items[k].tokens.size();
        // The first prefill of the prompt (not a recompute after a preemption) is the request's prefill.
        if (!s.prefilling() && s.resume.empty()) {
          if (metrics_) metrics_->add_prompt_tokens(static_cast<int64_t>(s.req->prompt.size()));
          if (ReqState* rs = state_of(s.req.get()); rs && metrics_)
            metrics_->observe(Hist::kPrefill, secs(now - rs->admitted));
        }
      }
      if (!items[k].want_logits) continue;
      if (items[k].all_logits) {
        // Every row but a last one that ends the prompt is a prompt token's score (see the plans above).
        const size_t base = s.prefilled - items[k].tokens.size();
        bool failed = false;
        for (size_t j = 0; j < items[k].tokens.size(); ++j) {
          const size_t pos = base + j;
          if (pos + 1 >= s.ctx().size()) break;
          const runtime::SampledToken& t = sampled[row];
          if (!plans[row++] || s.done || s.req->cancelled || failed) continue;
          if (fail_on_non_finite(t, *s.req)) {
            failed = true;
            continue;
          }
          // After a preemption the prompt is prefilled again: report each position once.
          if (pos == s.scored) {
            ++s.scored;
            s.req->on_prompt_logprob(t);
          }
        }
        if (failed || s.prefilling()) {
          row += s.prefilling() ? 0 : 1;
          continue;
        }
      }
      const runtime::SampledToken& tok = sampled[row];
      if (!plans[row++] || s.done || s.req->cancelled) continue;
      if (fail_on_non_finite(tok, *s.req)) continue;
      if (s.req->max_tokens == 0) {  // scoring only (echo with max_tokens 0): no token is generated
        finish_seq(s, FinishReason::kLength);
        continue;
      }
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
    if (metrics_) {
      int64_t tokens = 0;
      for (const auto& it : items) tokens += static_cast<int64_t>(it.tokens.size());
      metrics_->observe(Hist::kIterTokens, static_cast<double>(tokens));
      if (decode_only) {
        metrics_->observe(Hist::kDecodeStep, secs(Clock::now() - step_start));
        metrics_->observe(Hist::kDecodeForward, forward_secs);
      }
    }
    update_gauges();
  }
}

}  // namespace gridq::serve

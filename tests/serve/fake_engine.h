// A deterministic stand-in for the model: each sequence's next-token logits are a hash of its whole token
// history, so outputs depend only on the sequence itself (batch-invariant by construction) and a
// reference decode is a plain loop over fake_logits().
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "serve/engine_iface.h"

namespace gridq::serve::testing {

// Logits for a history: a fixed pseudo-random score per (history hash, token), restricted to `allowed` ids
// (others get -30) so generated text stays printable.
inline std::vector<float> fake_logits(const std::vector<int32_t>& hist, int32_t vocab, int32_t lo,
                                      int32_t hi) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : hist) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  std::vector<float> out(vocab, -30.0f);
  for (int32_t i = lo; i < hi; ++i) {
    uint64_t x = (h ^ (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    out[i] = static_cast<float>(x % 100000) / 10000.0f;
  }
  return out;
}

class FakeEngine final : public EngineIface {
 public:
  FakeEngine(int32_t vocab, int64_t max_len, int32_t lo, int32_t hi)
      : V_(vocab), L_(max_len), lo_(lo), hi_(hi) {}
  int32_t vocab_size() const override { return V_; }
  int64_t max_model_len() const override { return L_; }
  // Pages of kPage tokens, one set per sequence (no sharing); pages < 0: no page accounting.
  runtime::KvPageStats kv_pages() const override {
    std::lock_guard lk(mu_);
    runtime::KvPageStats k;
    k.page_tokens = kPage;
    k.total = pages;
    k.used = used_locked();
    return k;
  }
  int64_t kv_pages_needed(SeqId id, int64_t new_len) const override {
    std::lock_guard lk(mu_);
    auto it = seqs_.find(id);
    const int64_t have = it == seqs_.end() ? 0 : pages_for(static_cast<int64_t>(it->second.size()));
    return std::max<int64_t>(0, pages_for(new_len) - have);
  }
  Status add_sequence(SeqId id) override {
    std::lock_guard lk(mu_);
    if (seqs_.count(id)) return err("sequence {} exists", id);
    seqs_[id] = {};
    return {};
  }
  void remove_sequence(SeqId id) override {
    std::lock_guard lk(mu_);
    seqs_.erase(id);
  }
  Status forward(std::span<const StepItem> items, std::vector<float>& logits) override {
    ++forwards_started;
    if (step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms));
    std::lock_guard lk(mu_);
    ++steps;
    if (fail_at_step > 0 && steps >= fail_at_step)
      return err("injected engine failure at step {}", steps.load());
    max_batch_seen = std::max<int64_t>(max_batch_seen, static_cast<int64_t>(items.size()));
    for (const auto& it : items) {
      auto f = seqs_.find(it.seq);
      if (f == seqs_.end()) return err("forward on unknown sequence {}", it.seq);
      f->second.insert(f->second.end(), it.tokens.begin(), it.tokens.end());
      if (static_cast<int64_t>(f->second.size()) > L_) return err("sequence {} beyond max_model_len", it.seq);
      if (pages >= 0 && used_locked() > pages)
        return err("KV overcommitted: {} pages in use of {}", used_locked(), pages);
      // all_logits: one row per appended position, each over the history up to that position.
      const size_t rows = !it.want_logits ? 0 : it.all_logits ? it.tokens.size() : 1;
      for (size_t j = 0; j < rows; ++j) {
        const std::vector<int32_t> hist(f->second.begin(),
                                        f->second.end() - static_cast<ptrdiff_t>(rows - 1 - j));
        auto row = fake_logits(hist, V_, lo_, hi_);
        logits.insert(logits.end(), row.begin(), row.end());
      }
    }
    return {};
  }
  size_t live_sequences() const {
    std::lock_guard lk(mu_);
    return seqs_.size();
  }

  static constexpr int kPage = 4;
  int64_t pages = -1;
  int step_delay_ms = 0;
  int64_t fail_at_step = 0;
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> forwards_started{0};  // counted on entry: a step is in progress when > steps
  int64_t max_batch_seen = 0;

 private:
  static int64_t pages_for(int64_t n) { return (n + kPage - 1) / kPage; }
  int64_t used_locked() const {
    int64_t n = 0;
    for (const auto& [id, s] : seqs_) n += pages_for(static_cast<int64_t>(s.size()));
    return n;
  }
  int32_t V_;
  int64_t L_;
  int32_t lo_, hi_;
  mutable std::mutex mu_;
  std::map<SeqId, std::vector<int32_t>> seqs_;
};

// Greedy reference decode straight from fake_logits (no scheduler involved).
inline std::vector<int32_t> reference_greedy(std::vector<int32_t> hist, int64_t max_tokens,
                                             const std::vector<int32_t>& stop_ids, int32_t vocab, int32_t lo,
                                             int32_t hi) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    auto row = fake_logits(hist, vocab, lo, hi);
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; ++i)
      if (row[i] > row[best]) best = i;
    bool stop = false;
    for (int32_t s : stop_ids) stop = stop || s == best;
    if (stop) break;
    out.push_back(best);
    hist.push_back(best);
  }
  return out;
}

}  // namespace gridq::serve::testing

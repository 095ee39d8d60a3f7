// The interface every backend (cpu/, cuda/) implements: per-sequence KV state and one batched forward.
// The Engine (engine.h) owns sequence ids, chunking and logits bookkeeping; a backend only runs tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/model_weights.h"
#include "runtime/sampler.h"

namespace gridq::runtime {

using SeqId = int64_t;

enum class LogitsMode { kNone, kLast, kAll };

struct BatchItem {
  SeqId seq = 0;
  std::span<const int32_t> tokens;  // appended at positions seq_length .. seq_length + n - 1
  LogitsMode logits = LogitsMode::kLast;
};

// Logits rows a forward of `items` returns: every position of kAll items, the last of kLast ones.
inline size_t logits_rows(std::span<const BatchItem> items) {
  size_t rows = 0;
  for (const auto& it : items)
    rows += it.logits == LogitsMode::kAll ? it.tokens.size() : it.logits == LogitsMode::kLast ? 1 : 0;
  return rows;
}

struct KvPageStats {
  int page_tokens = 16;
  int64_t total = -1;  // pages in the pool; -1: no page accounting (KV grows on demand, unbounded)
  int64_t used = 0;    // referenced by live sequences (a shared page counts once)
  int64_t cached = 0;  // unreferenced prefix-cache pages (evictable, so free for admission)
  int64_t free() const { return total < 0 ? INT64_MAX : total - used; }
};

// What attach_prefix found. Positions [0, cached) have full-layer KV in shared pages. The sequence's length
// is now `resume` <= cached: positions [resume, cached) must still be run (the next forward's tokens start
// there) to rebuild the sliding-window rings, which live per sequence and cannot be shared; the backend
// writes no full-layer KV below `cached` (it is there already). resume = max(0, cached − Σ over sliding
// layers of (window − 1)), the receptive field of the stacked windows: below it nothing a position >= cached
// reads can depend on the ring contents left out, so the result is exact (bit for bit on a batch-invariant
// backend).
struct PrefixHit {
  int64_t cached = 0;
  int64_t resume = 0;
};

// Σ over the sliding layers of (window − 1): how far back the stacked windows reach (PrefixHit::resume).
inline int64_t sliding_reach(const model::ModelSpec& spec) {
  int64_t r = 0;
  for (const auto& L : spec.layers)
    if (L.attn == model::AttnKind::kSliding) r += L.window > 1 ? L.window - 1 : 0;
  return r;
}
// The hit of `pages` matched pages of `page_tokens` positions on a model whose windows reach `reach` back.
inline PrefixHit prefix_hit(size_t pages, int page_tokens, int64_t reach) {
  PrefixHit h;
  h.cached = static_cast<int64_t>(pages) * page_tokens;
  h.resume = h.cached > reach ? h.cached - reach : 0;
  return h;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const model::ModelSpec& spec() const = 0;
  virtual Status add_sequence(SeqId id) = 0;
  virtual void remove_sequence(SeqId id) = 0;
  virtual int64_t sequence_length(SeqId id) const = 0;
  // Runs all items in one forward (each item's tokens see only its own sequence). Appends to `logits`
  // [rows, vocab] fp32 one row per requested position, items in order, positions ascending.
  virtual Status forward(std::span<const BatchItem> items, std::vector<float>& logits) = 0;
  // Whether forward_sampled() runs here: a device backend samples where the logits are and copies back a
  // token per row instead of a row of logits (the Engine samples on the host for the others).
  virtual bool samples_on_device() const { return false; }
  // forward(items) and, for logits row r, the token Sampler::run(*plans[r], row) picks (runtime/sampler.h;
  // plans[r] null: the row is not sampled, its token is -1). One entry of `out` per logits row.
  virtual Status forward_sampled(std::span<const BatchItem> items, std::span<const SamplePlan* const> plans,
                                 std::vector<SampledToken>& out) {
    (void)items, (void)plans, (void)out;
    return err("this backend does not sample on its device (samples_on_device() is false)");
  }
  // What a device backend holds, for the start-up report ("weights 37.6 GB, KV 80.1 GB (1.9 M tokens), ...");
  // empty for a backend that allocates on demand (the CPU).
  virtual std::string memory_report() const { return {}; }
  // One line per kernel path the backend runs and how many matrices take it (the start-up report); empty for
  // a backend whose weights report their formats otherwise (the CPU: serve/weight_report.h).
  virtual std::vector<std::string> kernel_report() const { return {}; }
  // The formats, shapes and activation contracts of the matrices the backend runs (the start-up report groups
  // them); a device backend keeps only this metadata (data pointers null). Null: not reported.
  virtual const ModelWeights* weight_metadata() const { return nullptr; }
  // ---- KV pages (admission, preemption, prefix caching; kv_pages.h) ----
  // The page pool as it stands: total -1 for a backend without page accounting (then nothing is refused
  // for want of KV). `cached` pages hold prefix-cache KV no sequence references: they are evictable, so
  // they count as free.
  virtual KvPageStats kv_pages() const { return {}; }
  // New pages sequence `id` must get to hold `new_len` positions (0 when its pages already cover them;
  // pages attached from the prefix cache count as held).
  virtual int64_t kv_pages_needed(SeqId id, int64_t new_len) const {
    (void)id, (void)new_len;
    return 0;
  }
  // Whether attach_prefix() can share pages: the backend stores full-layer KV in refcounted pages, can
  // start a sequence on shared pages, and can run positions below a floor without writing their full-layer
  // KV (the rings of the sliding layers must be rebuilt from recomputed positions; see PrefixHit).
  virtual bool supports_prefix_caching() const { return false; }
  virtual Status set_prefix_caching(bool on) {
    if (on) return err("this backend does not support prefix caching");
    return {};
  }
  // For a sequence that holds nothing yet (length 0): the longest cached page-aligned prefix of `tokens`
  // (always leaving at least the last token to compute), whose pages it now shares.
  virtual Expected<PrefixHit> attach_prefix(SeqId id, std::span<const int32_t> tokens) {
    (void)id, (void)tokens;
    return PrefixHit{};
  }
};

}  // namespace gridq::runtime

// What the server needs from a model: per-sequence KV state and one batched forward returning the logits of
// each item's last position. The scheduler samples itself (runtime/sampler.h), so an engine is just this
// interface; tests drive the whole server with a deterministic fake (tests/serve/fake_engine.h) and
// serve/runtime_engine.h adapts the real runtime backend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/backend.h"
#include "runtime/sampler.h"

namespace gridq::serve {

using SeqId = int64_t;

struct StepItem {
  SeqId seq = 0;
  std::span<const int32_t> tokens;  // appended at positions length(seq) .. length(seq) + n - 1
  bool want_logits = true;          // logits of the last appended position
  // With want_logits: a row for every appended position instead (prompt scoring, runtime::LogitsMode::kAll).
  bool all_logits = false;
};

class EngineIface {
 public:
  virtual ~EngineIface() = default;
  virtual int32_t vocab_size() const = 0;
  virtual int64_t max_model_len() const = 0;
  // KV pages (runtime/backend.h): the pool (total -1: no page accounting, nothing is refused or
  // preempted for KV), the new pages a sequence needs to hold new_len positions, and the prefix cache.
  virtual runtime::KvPageStats kv_pages() const = 0;
  virtual int64_t kv_pages_needed(SeqId id, int64_t new_len) const = 0;
  virtual bool prefix_caching() const { return false; }
  // Only on a sequence that holds nothing yet; see runtime::PrefixHit.
  virtual Expected<runtime::PrefixHit> attach_prefix(SeqId id, std::span<const int32_t> tokens) {
    (void)id, (void)tokens;
    return runtime::PrefixHit{};
  }
  virtual Status add_sequence(SeqId id) = 0;
  virtual void remove_sequence(SeqId id) = 0;
  // Runs all items in one forward; appends one row of vocab_size() floats per item with want_logits (one per
  // position with all_logits), in order. Each item's row must not depend on the other items (batch
  // invariance, api.md §8).
  virtual Status forward(std::span<const StepItem> items, std::vector<float>& logits) = 0;
  // forward(items), then each want_logits row r sampled by plans[r] (runtime::Sampler::plan; null: not
  // sampled, token -1): one token per row comes back instead of its logits. This default samples on the host
  // from forward()'s logits; RuntimeEngine hands it to the runtime Engine, which samples on the device when
  // the backend can (the same algorithm either way, runtime/sampler.h).
  virtual Status forward_sampled(std::span<const StepItem> items,
                                 std::span<const runtime::SamplePlan* const> plans,
                                 std::vector<runtime::SampledToken>& out) {
    std::vector<float> logits;
    GRIDQ_RETURN_IF_ERROR(forward(items, logits));
    const size_t V = static_cast<size_t>(vocab_size());
    if (logits.size() != plans.size() * V)
      return err("engine returned {} logits for {} rows of vocab {}", logits.size(), plans.size(), V);
    auto toks = runtime::sample_rows(logits, V, plans);
    out.insert(out.end(), std::make_move_iterator(toks.begin()), std::make_move_iterator(toks.end()));
    return {};
  }
  // Whether forward_sampled() is forward() then runtime::sample_rows on the host (this default): the
  // scheduler may then run the two itself, with structured-output masks computed during the forward.
  virtual bool samples_on_host() const { return true; }
  // One line per weight format naming the kernel path in use (logged at start).
  virtual std::vector<std::string> describe_kernels() const { return {}; }
};

}  // namespace gridq::serve

// Adapts runtime::Engine (the real model) to the scheduler's EngineIface.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "runtime/engine.h"
#include "serve/engine_iface.h"
#include "serve/weight_report.h"

namespace gridq::serve {

class RuntimeEngine final : public EngineIface {
 public:
  // `prefix_caching`: turn the backend's prefix cache on (refused when it has none: check
  // supports_prefix_caching() first).
  static Expected<std::unique_ptr<RuntimeEngine>> create(std::unique_ptr<runtime::Engine> eng,
                                                         int64_t max_model_len, bool prefix_caching);
  int32_t vocab_size() const override;
  int64_t max_model_len() const override { return max_len_; }
  runtime::KvPageStats kv_pages() const override;
  int64_t kv_pages_needed(SeqId id, int64_t new_len) const override;
  bool prefix_caching() const override { return prefix_caching_; }
  Expected<runtime::PrefixHit> attach_prefix(SeqId id, std::span<const int32_t> tokens) override;
  Status add_sequence(SeqId id) override;
  void remove_sequence(SeqId id) override;
  Status forward(std::span<const StepItem> items, std::vector<float>& logits) override;
  Status forward_sampled(std::span<const StepItem> items, std::span<const runtime::SamplePlan* const> plans,
                         std::vector<runtime::SampledToken>& out) override;
  bool samples_on_host() const override;
  std::vector<std::string> describe_kernels() const override;
  // The formats of the matrices the backend runs (empty for a backend that does not expose them).
  std::vector<WeightFormatUse> weight_formats() const;
  runtime::Engine& engine() { return *eng_; }

 private:
  RuntimeEngine(std::unique_ptr<runtime::Engine> eng, int64_t max_model_len);
  Status batch(std::span<const StepItem> items, std::vector<runtime::BatchItem>& b) const;
  std::unique_ptr<runtime::Engine> eng_;
  int64_t max_len_;
  bool prefix_caching_ = false;
  mutable std::mutex mu_;
  std::map<SeqId, runtime::SeqId> ids_;
};

}  // namespace gridq::serve

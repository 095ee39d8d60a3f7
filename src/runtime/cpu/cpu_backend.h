// The reference backend: the forward of laguna.md §1 (and the Qwen3-MoE / Llama variants the ModelSpec
// describes) in fp32 activations and accumulation over BF16/FP8/CB weights. Exactness first: this is the
// oracle every faster backend is checked against. The per-layer math lives in layer_ops.h (shared with the
// quantizer's layer-streamed teacher); this class owns sequences, KV caches, embedding and logits.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/model_weights.h"

namespace gridq::runtime::cpu {

struct CpuOptions {
  int threads = 0;  // 0 = OpenMP default
};

class CpuBackend final : public Backend {
 public:
  // `keepalive` owns whatever the weights point into (checkpoint mmaps, artifact buffers).
  static Expected<std::unique_ptr<CpuBackend>> create(model::ModelSpec spec, ModelWeights weights,
                                                      std::shared_ptr<void> keepalive, CpuOptions opts = {});

  const model::ModelSpec& spec() const override { return spec_; }
  Status add_sequence(SeqId id) override;
  void remove_sequence(SeqId id) override;
  int64_t sequence_length(SeqId id) const override;
  Status forward(std::span<const BatchItem> items, std::vector<float>& logits) override;
  const ModelWeights* weight_metadata() const override { return &w_; }
  // The matrices as the kernels run them (formats, rungs): `gridq serve` reports their kernel paths.
  const ModelWeights& weights() const { return w_; }

 private:
  struct SeqState {
    int64_t len = 0;
    std::vector<LayerCache> layers;
  };

  CpuBackend() = default;

  model::ModelSpec spec_;
  ModelWeights w_;
  std::shared_ptr<void> keepalive_;
  std::unordered_map<SeqId, SeqState> seqs_;
};

}  // namespace gridq::runtime::cpu

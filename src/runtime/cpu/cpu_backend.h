// The reference backend: the forward of laguna.md §1 (and the Qwen3-MoE / Llama variants the ModelSpec
// describes) in fp32 activations and accumulation over BF16/FP8/CB weights. Exactness first: this is the
// oracle every faster backend is checked against.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
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

 private:
  struct LayerCache {
    std::vector<float> k;  // full: [len, n_kv*d], grows; sliding: [W, n_kv*d] ring, slot = pos % W
    std::vector<float> v;
  };
  struct SeqState {
    int64_t len = 0;
    std::vector<LayerCache> layers;
  };
  // Per-forward token layout.
  struct TokenMap {
    std::vector<int64_t> pos;         // [T] absolute position of each token
    std::vector<size_t> item_of;      // [T] index into items
    std::vector<int64_t> item_start;  // [n_items] first token row of each item
    std::vector<SeqState*> state;     // [n_items]
  };

  CpuBackend() = default;
  void attention(int l, const TokenMap& tm, std::span<const BatchItem> items, const float* a, float* x);
  void mlp(int l, int64_t T, const float* a, float* x);
  void moe(int l, int64_t T, const float* a, float* out);

  model::ModelSpec spec_;
  ModelWeights w_;
  std::shared_ptr<void> keepalive_;
  std::unordered_map<SeqId, SeqState> seqs_;
};

// RMSNorm of each of T rows of width n in place-safe form: out = w * (v / sqrt(mean(v^2) + eps)).
void rmsnorm_rows(const float* in, const float* w, int64_t T, int64_t n, float eps, float* out);

}  // namespace gridq::runtime::cpu

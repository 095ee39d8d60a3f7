// The reference backend: the forward of laguna.md §1 (and the Qwen3-MoE / Llama variants the ModelSpec
// describes) in fp32 activations and accumulation over BF16/FP8/CB weights. Exactness first: this is the
// oracle every faster backend is checked against. The per-layer math lives in layer_ops.h (shared with the
// quantizer's layer-streamed teacher); this class owns sequences, KV caches, embedding and logits.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/weight_pages.h"
#include "runtime/kv_pages.h"
#include "runtime/model_weights.h"

namespace gridq::runtime::cpu {

// Which dot products the forward runs (bf16_dot.h): the reference order everywhere (fp32 activations,
// bit-identical on every x86 with or without AVX2), or the BF16 fast path for the BF16 matrices (not the
// router, whose fp32 scores choose the experts) on a CPU with AVX512-BF16.
enum class CpuKernels { kReference, kBf16 };

struct CpuOptions {
  int threads = 0;                              // 0 = OpenMP default
  CpuKernels kernels = CpuKernels::kReference;  // kBf16 is refused on a CPU without AVX512-BF16
  // Full-layer KV pages (kv_pages.h) of page_tokens positions: 0 = no budget (the pool grows on demand and
  // kv_pages() reports no page accounting); > 0 = a fixed pool, as a device backend has (`gridq serve` sets
  // it: --num-gpu-blocks-override, else max_num_seqs × max_model_len). Page memory is allocated on first use.
  int64_t kv_pages = 0;
  int page_tokens = 16;
  // kHuge / kAuto: the matrices are copied at create() onto transparent huge pages (weight_pages.h; the same
  // bits), kAuto only where the copy takes at most half of the available memory.
  WeightPages weight_pages = WeightPages::kMapped;
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
  std::vector<std::string> kernel_report() const override;
  KvPageStats kv_pages() const override;
  int64_t kv_pages_needed(SeqId id, int64_t new_len) const override;
  bool supports_prefix_caching() const override { return true; }
  Status set_prefix_caching(bool on) override;
  Expected<PrefixHit> attach_prefix(SeqId id, std::span<const int32_t> tokens) override;
  const PagePool& page_pool() const { return pool_; }
  // The matrices as the kernels run them (formats, rungs): `gridq serve` reports their kernel paths.
  const ModelWeights& weights() const { return w_; }
  // Where the matrices live, as the start-up line says it (weight_pages_log).
  std::string weight_pages_report() const { return weight_pages_log(weight_copy_); }

 private:
  struct SeqState {
    int64_t len = 0;
    std::vector<LayerCache> layers;  // sliding layers: the ring; full layers: KV in `pages`
    std::vector<int> pages;          // page of positions [i·page_tokens, (i+1)·page_tokens)
    std::vector<int32_t> hist;       // tokens at positions [0, len) (the prefix-cache keys of full pages)
    int64_t floor = 0;               // positions below hold full-layer KV in shared pages (not rewritten)
    size_t committed = 0;            // pages registered with the prefix cache (or found in it)
    uint64_t chain = 0;              // chain hash of page committed-1
  };

  CpuBackend() = default;
  int64_t pages_for(int64_t tokens) const;
  // Gives each item's sequence the pages its new positions need, all or none (refusing a full pool).
  Status grow_pages(std::span<const BatchItem> items, std::span<SeqState* const> state);
  // Registers the sequence's newly filled pages with the prefix cache.
  void commit_pages(SeqState& s);

  model::ModelSpec spec_;
  ModelWeights w_;
  std::shared_ptr<void> keepalive_;
  WeightCopy weight_copy_;  // the matrices' bytes when copied (w_ points into it)
  std::unordered_map<SeqId, SeqState> seqs_;
  CpuOptions opts_;
  PagePool pool_;
  std::vector<LineVector<float>> page_mem_;  // [page] the page's K and V of every full layer
  std::vector<int64_t> k_off_;               // [layer] element offset of a full layer's K inside a page
  int64_t page_floats_ = 0;                  // a page's floats (BF16 elements two to a float)
  bool kv_bf16_ = false;                     // K and V stored as BF16 (the fast path)
  int64_t reach_ = 0;                        // Σ over sliding layers of (window − 1): PrefixHit::resume
  // A forward's layout and buffers, kept between calls so a decode step does not allocate.
  struct Step {
    AttnLayout lay;
    std::vector<SeqState*> state;                // [n_items]
    std::vector<std::vector<float*>> page_ptrs;  // [n_items] page memory of the sequence's pages
    LineVector<float> x, a;                      // [T, H] residual stream; a block's normalised input
    LineVector<float> h;                         // [R, H] final norm of the rows that want logits
    std::vector<int64_t> rows;                   // [R] those rows
  } step_;
};

}  // namespace gridq::runtime::cpu

// The CPU reference forward, one decoder layer at a time (laguna.md §1.2–§1.4): RMSNorm, attention over a
// batch of sequences (RoPE, sliding window, qk-norm, softplus output gate), dense SwiGLU MLP, MoE router +
// experts + shared expert. CpuBackend runs these for the engine; the quantizer's layer-streamed teacher
// (quant/layer_streamer.cpp) runs the very same functions over the calibration set and observes the
// intermediate tensors through LayerHooks. One copy of the math, so the teacher is the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/cpu/scratch.h"
#include "runtime/model_weights.h"

namespace gridq::runtime::cpu {

// A full layer's KV kept in pages (CpuBackend, kv_pages.h): position j's K row is element
// k_off + (j % page_tokens)·n_kv·d of pages[j / page_tokens], its V row the same from v_off (elements are
// fp32, or BF16 when the cache's bf16 is set). Positions below write_floor are not written: their KV is
// already in pages shared from the prefix cache.
struct PagedKv {
  const std::vector<float*>* pages = nullptr;
  int64_t page_tokens = 0, k_off = 0, v_off = 0, write_floor = 0;
};

// One layer's KV state of one sequence.
struct LayerCache {
  LineVector<float> k;  // full: [len, n_kv*d], grows; sliding: [W, n_kv*d] ring, slot = pos % W
  LineVector<float> v;
  PagedKv paged;  // full layers: pages set: k and v unused
  // K and V as BF16 (the fast path's cache, --cpu-kernels bf16: half the bytes a decode step reads), packed
  // two elements to a float of k, v and the pages; attention() then runs its fast arithmetic on them.
  bool bf16 = false;
};

// An empty cache for a sequence at position 0 (the ring of a sliding layer is allocated up front).
LayerCache fresh_layer_cache(const model::LayerSpec& L, bool bf16 = false);

// One sequence's rows in a batched layer call. Its tokens sit at positions past .. past+n-1.
struct AttnSeq {
  LayerCache* cache = nullptr;  // this layer's KV state of the sequence; updated by attention()
  int64_t past = 0;             // tokens already in the cache
  int64_t start = 0;            // first row of this sequence in the batch
  int64_t n = 0;                // rows
};

// Token layout of a batched layer call: sequences are contiguous row ranges.
struct AttnLayout {
  std::vector<AttnSeq> seqs;
  std::vector<int64_t> pos;    // [T] absolute position of each row
  std::vector<size_t> seq_of;  // [T] index into seqs
  int64_t tokens() const { return static_cast<int64_t>(pos.size()); }
};

// Observers of one decoder layer's intermediate tensors (the quantizer's calibration capture). Pointers are
// valid only during the call; an empty hook costs one branch, and hooks never change the numbers.
struct LayerHooks {
  // a [T, H]: input_layernorm output (q/k/v/g_proj input); h [T, H]: the residual it normalised.
  std::function<void(const float* a, const float* h, int64_t T)> attn_in;
  // o [T, n_h*d]: softplus-gated attention output (o_proj input).
  std::function<void(const float* o, int64_t T)> o_in;
  // a [T, H]: post_attention_layernorm output (router / shared / dense gate+up input); h [T, H] its residual.
  std::function<void(const float* a, const float* h, int64_t T)> mlp_in;
  // u [T, D]: dense-MLP down_proj input silu(gate·a) ⊙ (up·a).
  std::function<void(const float* u, int64_t T)> dense_down_in;
  // u [T, I_s]: shared-expert down_proj input.
  std::function<void(const float* u, int64_t T)> shared_down_in;
  // idx, weight [T, K]: the chosen experts of each row and their routing weights.
  std::function<void(const int* idx, const float* weight, int64_t T)> routing;
  // Expert e over the rows routed to it, ascending row index: rows[n], weight[n] (routing weights),
  // x [n, H] (its gate/up input), u [n, I] (its down_proj input silu(gate·x) ⊙ (up·x)). A caller may run
  // it for different experts concurrently (the GPU teacher does): it must touch expert e's state only.
  std::function<void(int e, std::span<const int64_t> rows, std::span<const float> weight, const float* x,
                     const float* u)>
      expert;
};

// Checks every weight the forward reads against the spec (shapes, formats, norm sizes, head counts).
Status validate_weights(const model::ModelSpec& s, const ModelWeights& w);

// Whether layer lw runs the fast path's arithmetic (--cpu-kernels bf16: CpuBackend set its projections'
// cpu_bf16_dot, which needs AVX512-BF16): its norms and attention then take the fast forms.
bool on_fast_path(const LayerWeights& lw);

// Σ v[i]² in float64, i ascending: the reference's sum for RMSNorm.
double sum_squares(const float* v, int64_t n);
// RMSNorm of each of T rows of width n, in-place safe: out = w * (v / sqrt(mean(v^2) + eps)), the mean from
// `ss` (the reference's sum, or the fast path's sum_squares_fast: bf16_dot.h).
void rmsnorm_rows(const float* in, const float* w, int64_t T, int64_t n, float eps, float* out,
                  double (*ss)(const float*, int64_t) = sum_squares);

// One decoder layer on the residual stream x [T, H] in place (pre-norm, two residual adds). `a` is scratch
// that ends up holding the post_attention_layernorm output. The sequences' caches advance by their rows;
// the caller bumps `past` for the next call.
void decoder_layer(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
                   float* x, LineVector<float>& a, const LayerHooks* hooks = nullptr);

// x += o_proj(gate ⊙ attention(a)) over the layout's sequences.
void attention(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
               const float* a, float* x, const LayerHooks* hooks = nullptr);
// x += MLP(a) (dense SwiGLU or MoE, by the layer's kind).
void mlp(const model::ModelSpec& spec, const LayerWeights& lw, int l, int64_t T, const float* a, float* x,
         const LayerHooks* hooks = nullptr);

}  // namespace gridq::runtime::cpu

// The MLP ops of a decoder layer (moe.cpp), for layer_ops.cpp's mlp().
#pragma once

#include <cstdint>

#include "runtime/cpu/layer_ops.h"

namespace gridq::runtime::cpu {

// SwiGLU over T rows: out[T, H] = (silu(a·Gᵀ) ⊙ a·Uᵀ)·Dᵀ. On return hg [T, I] holds silu(a·Gᵀ) ⊙ a·Uᵀ (the
// down_proj input); hg and hu [T, I] are caller scratch.
void swiglu(const QMatrix& g, const QMatrix& u, const QMatrix& d, const float* a, int64_t T, float* out,
            float* hg, float* hu);
// out[T, H] = routed_scaling · Σ_k w_k · expert_k(a) (+ shared expert(a)).
void moe(const model::ModelSpec& spec, const LayerWeights& lw, int64_t T, const float* a, float* out,
         const LayerHooks* hooks);

}  // namespace gridq::runtime::cpu

// The tensor-core attention splits (attention_tc.cu): the same partials as the FP32 split kernel's contract
// in attention.cu, with the running max in the log2 domain. Plain data and cudaError_t only.
#pragma once

#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::detail {

// head_dim 32, 64 or 128 and at most 16 query heads per KV head.
bool attention_tc_supported(int d, int nh, int nkv);

// a.partial[(t·nh + h)·max_splits + s] = (max·log2 e, sum, unnormalised O[d]) of split s for every pair
// (row t, head h) and every split s its window touches; `warps` (1, 4 or 8) CTA warps, 16 pairs each: a
// pair's bits do not depend on it. With a.fused: a.o directly, the splits folded in the kernel (no partials).
cudaError_t raw_attention_tc_splits(const AttnArgs& a, int warps, cudaStream_t s);

}  // namespace gridq::cuda::detail

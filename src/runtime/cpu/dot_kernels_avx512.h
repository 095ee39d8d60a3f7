// The AVX-512 forms of the reference-order kernels (dot_kernels.h): the bits of the AVX2 and scalar forms.
// Internal to the CPU backend: dot_kernels.cpp calls them only when have_avx512() and, where noted,
// n % 16 == 0; attention.cpp calls the fused forms on the fast path (--cpu-kernels bf16).
#pragma once

#include <cstdint>

namespace gridq::runtime::cpu {

// dot4 over fp32 / BF16 rows (n % 16 == 0; pf as in dot4_bf16).
void dot4_f32_avx512(const float* const* w, const float* x, int64_t n, float* y);
void dot4_bf16_avx512(const uint16_t* const* w, const float* x, int64_t n, float* y, int64_t pf);
void weighted_sum_avx512(const float* a, const float* const* v, int64_t nv, int64_t d, float* out);
// dot4_heads (n % 16 == 0) and weighted_sum_heads for 1 ≤ nq ≤ 4.
void dot4_heads_avx512(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n, float* s);
void weighted_sum_heads_avx512(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                               float* const* out);
// The same loops with each product and sum fused (FMA): not the reference's bits, the fast path's attention.
void dot4_heads_fused(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n, float* s);
void weighted_sum_heads_fused(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                              float* const* out);
// The same over BF16 keys and values (the fast path's KV cache), each widened exactly as it is loaded.
void dot4_heads_fused(const float* const* q, int nq, const uint16_t* const* k, int64_t nk, int64_t n,
                      float* s);
void weighted_sum_heads_fused(const float* const* a, int nq, const uint16_t* const* v, int64_t nv, int64_t d,
                              float* const* out);

}  // namespace gridq::runtime::cpu

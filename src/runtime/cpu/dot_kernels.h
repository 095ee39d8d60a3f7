// Dot products of the CPU reference forward, one summation order for every path (the "reference order"):
// 16 lanes, lane j accumulating columns c ≡ j (mod 16) in ascending c, each step a product then a sum (no
// FMA), then the tree lane[j] += lane[j + s] for s = 8, 4, 2, 1. Every variant below (fp32, BF16 or E4M3
// rows read in place, one row or four at a time, AVX-512, AVX2 or scalar) gives the bits of that order, so
// the kernel a call takes never changes a logit. Bound: weight bandwidth at decode (rows are read straight
// from the weights, widened in registers), load ports at prefill (rows widened once per token tile).
#pragma once

#include <cstdint>

namespace gridq::runtime::cpu {

// Whether the AVX2 (+F16C) kernels run; otherwise scalar loops of the same order. Fixed at start-up.
bool have_avx2();
// Whether the AVX-512 forms of dot4 (fp32, BF16 rows) and weighted_sum run: the same lanes in one zmm,
// the same bits, about half the instructions. Fixed at start-up.
bool have_avx512();

float dot(const float* a, const float* b, int64_t n);
// y[r] = dot(x, w[r], n) for r < 4, bit-identical to four dot() calls (x is read once; faster).
void dot4(const float* x, const float* const* w, int64_t n, float* y);
// The same with BF16 rows (widening is exact, so the same bits as dot on the widened rows). pf > 0
// prefetches the rows pf elements on (the next block of a matrix at decode: pf = 4·n).
float dot_bf16(const uint16_t* w, const float* x, int64_t n, int64_t pf = 0);
void dot4_bf16(const float* x, const uint16_t* const* w, int64_t n, float* y, int64_t pf = 0);
// The same with E4M3 rows: y[r] = Σ e4m3(w[r][c])·x[c], NaN codes included.
void dot4_e4m3(const float* x, const uint8_t* const* w, int64_t n, float* y, int64_t pf = 0);
float dot_e4m3(const uint8_t* w, const float* x, int64_t n, int64_t pf = 0);

// The same for `rows` (<= 4) E4M3 rows at decode, faster: x256 = 256·x[c] exactly (the caller's copy, made
// once per token; needs |x| < 2^100), x itself for rows with NaN codes; pf as for dot4_bf16.
void dot_e4m3_x256(const uint8_t* const* w, int rows, const float* x, const float* x256, int64_t n, float* y,
                   int64_t pf = 0);

// Rows widened to fp32 (exact).
void widen_bf16(const uint16_t* in, float* out, int64_t n);
void widen_e4m3(const uint8_t* in, float* out, int64_t n);

// out[e] = Σ_j a[j]·v[j][e] for e < d, j ascending, each step a product then a sum from out = 0: the bits of
// fill(out, 0) and then axpy(a[j], v[j], out, d) for each j (attention's value sum).
void weighted_sum(const float* a, const float* const* v, int64_t nv, int64_t d, float* out);
// Several query heads against the same rows at once (attention's GQA groups: each key and value row is
// loaded once for all of them), the bits of the single-head calls.
inline constexpr int kHeadsPerPass = 4;
// s[i·4 + r] = dot(q[i], k[r], n) for i < nq ≤ kHeadsPerPass, r < 4. k holds nk ≥ 4 row pointers: rows
// k[4..nk) are the ones read next (only prefetched).
void dot4_heads(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n, float* s);
// weighted_sum(a[i], v, nv, d, out[i]) for i < nq ≤ kHeadsPerPass.
void weighted_sum_heads(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                        float* const* out);
// y[i] += a * x[i] for i < n, rounded exactly as that scalar loop (vectorised, no FMA).
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace gridq::runtime::cpu

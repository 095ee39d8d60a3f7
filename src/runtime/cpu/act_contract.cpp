// Vectorised activation contracts (act_contract.h). Each step is the reference's step in IEEE fp32 (true
// division, one rounding per operation), with the integer RNE routines of core/numerics.h replaced by their
// SIMD equivalents:
//  - bf16_rn(x) for non-NaN x: (bits + 0x7FFF + bit16) & 0xFFFF0000 (a carry into the exponent is RNE);
//  - e4m3 RNE of |v| < 2^-6 (subnormal, quantum 2^-9): round_even(|v|·2^9)·2^-9, exact scalings;
//    of |v| >= 2^-6: the same integer trick on the 20 dropped mantissa bits; then min(·, 448) (satfinite:
//    the reference maps |v| >= 448 to 448, and nothing below 448 rounds past it), sign put back;
//  - the FP4 snap (nearest of the 15 grid values, exact ties to the lower one): -6 + Σ step_k·[v > mid_k]
//    over the 14 midpoints. Near a midpoint the reference's distances |hi - v| and |v - lo| are exact
//    (Sterbenz, or a zero neighbour), so "d_hi < d_lo" is exactly "v > mid".
#include "runtime/cpu/act_contract.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <span>
#include <vector>

#include "core/act_qdq.h"
#include "core/numerics.h"
#include "runtime/cpu/dot_kernels.h"

namespace gridq::runtime::cpu {

namespace {

float fp8_reference(const float* x, int64_t n, float* q) {
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<size_t>(n));
  const float s = quantize_fp8_token_row_f32(std::span<const float>(x, static_cast<size_t>(n)), codes);
  for (int64_t c = 0; c < n; ++c) q[c] = e4m3_to_f32(codes[static_cast<size_t>(c)]);
  return s;
}

// §14.1's grid midpoints and the steps between the grid values they separate.
constexpr float kFp4Mid[14] = {-5.0f, -3.5f, -2.5f, -1.75f, -1.25f, -0.75f, -0.25f,
                               0.25f, 0.75f, 1.25f, 1.75f,  2.5f,   3.5f,   5.0f};
constexpr float kFp4Step[14] = {2.0f, 1.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f,
                                0.5f, 0.5f, 0.5f, 0.5f, 1.0f, 1.0f, 2.0f};

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace {

inline __m256 bf16_rn8(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
  return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

inline __m256 e4m3_rn8(__m256 v) {
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
  const __m256i b = _mm256_castps_si256(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(1));
  const __m256i rn = _mm256_and_si256(_mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), odd)),
                                      _mm256_set1_epi32(static_cast<int>(0xFFF00000u)));
  const __m256 sub = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256 r =
      _mm256_blendv_ps(_mm256_castsi256_ps(rn), sub, _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
  return _mm256_or_ps(_mm256_min_ps(r, _mm256_set1_ps(448.0f)), sign);
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline bool any_nan8(__m256 v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }

// Returns s, or NaN when the row needs the reference (a NaN in it, or a non-finite scale).
float fp8_avx2(const float* x, int64_t n, float* q, bool qdq) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    if (any_nan8(v)) return NAN;
    amax = _mm256_max_ps(amax, _mm256_and_ps(bf16_rn8(v), absmask));
  }
  float a = hmax8(amax);
  for (int64_t k = c; k < n; ++k) {
    if (std::isnan(x[k])) return NAN;
    a = std::max(a, std::fabs(bf16_round(x[k])));
  }
  const float s = fp8_token_scale(a);
  if (!std::isfinite(s)) return NAN;
  const __m256 vs = _mm256_set1_ps(s);
  for (c = 0; c + 8 <= n; c += 8) {
    const __m256 e = e4m3_rn8(_mm256_div_ps(bf16_rn8(_mm256_loadu_ps(x + c)), vs));
    _mm256_storeu_ps(q + c, qdq ? bf16_rn8(_mm256_mul_ps(e, vs)) : e);
  }
  for (; c < n; ++c) {
    const float e = e4m3_to_f32(f32_to_e4m3_sat(bf16_round(x[c]) / s));
    q[c] = qdq ? bf16_round(e * s) : e;
  }
  return s;
}

// One group of 16; false when it holds a NaN or an inf (the caller takes the reference).
bool fp4_group_avx2(const float* x, float* out) {
  const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  if (any_nan8(x0) || any_nan8(x1)) return false;
  const __m256 b0 = bf16_rn8(x0), b1 = bf16_rn8(x1);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const float a = hmax8(_mm256_max_ps(_mm256_and_ps(b0, absmask), _mm256_and_ps(b1, absmask)));
  const float s = std::max(a, 1e-8f) * std::bit_cast<float>(0x3E2AAAABu);  // as qdq_fp4_group16
  if (!std::isfinite(s)) return false;  // an inf: inf/inf is NaN, which the reference snaps its own way
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 v0 = _mm256_div_ps(b0, vs), v1 = _mm256_div_ps(b1, vs);
  __m256 q0 = _mm256_set1_ps(-6.0f), q1 = q0;
  for (int k = 0; k < 14; ++k) {
    const __m256 mid = _mm256_set1_ps(kFp4Mid[k]), step = _mm256_set1_ps(kFp4Step[k]);
    q0 = _mm256_add_ps(q0, _mm256_and_ps(_mm256_cmp_ps(v0, mid, _CMP_GT_OQ), step));
    q1 = _mm256_add_ps(q1, _mm256_and_ps(_mm256_cmp_ps(v1, mid, _CMP_GT_OQ), step));
  }
  _mm256_storeu_ps(out, bf16_rn8(_mm256_mul_ps(q0, vs)));
  _mm256_storeu_ps(out + 8, bf16_rn8(_mm256_mul_ps(q1, vs)));
  return true;
}

}  // namespace

#pragma GCC pop_options

float fp8_token_values(const float* x, int64_t n, float* q) {
  if (have_avx2()) {
    const float s = fp8_avx2(x, n, q, false);
    if (!std::isnan(s)) return s;
  }
  return fp8_reference(x, n, q);
}

void qdq_fp8_row(const float* x, int64_t n, float* out) {
  if (have_avx2() && !std::isnan(fp8_avx2(x, n, out, true))) return;
  Status st = qdq_fp8_token_row_f32(std::span<const float>(x, static_cast<size_t>(n)),
                                    std::span<float>(out, static_cast<size_t>(n)));
  (void)st;  // equal sizes by construction
}

void qdq_fp4_row(const float* x, int64_t n, float* out) {
  for (int64_t g = 0; g < n; g += 16) {
    if (have_avx2() && fp4_group_avx2(x + g, out + g)) continue;
    Status st = qdq_fp4_row_f32(std::span<const float>(x + g, 16), std::span<float>(out + g, 16));
    (void)st;  // one whole group
  }
}

}  // namespace gridq::runtime::cpu

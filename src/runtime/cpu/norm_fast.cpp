// The fast path's RMSNorm (bf16_dot.h): the reference's float64 sum of squares taken eight lanes at a time
// (lane j: the elements i ≡ j mod 8, ascending, then a fixed tree) instead of one long dependent chain. The
// float variance it rounds to is the reference's but for a last-bit tie in rare rows; everything after is the
// reference's arithmetic. One row's result depends on that row alone.
#include <immintrin.h>

#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/simd_tree.h"

namespace gridq::runtime::cpu {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
GRIDQ_AVX512_WARNINGS_OFF

double sum_squares_fast(const float* v, int64_t n) {
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(v + i));
    acc = _mm512_fmadd_pd(d, d, acc);  // exact product: a float's square fits a double
  }
  if (i < n) {
    const __mmask8 m = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512d d = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, v + i));
    acc = _mm512_fmadd_pd(d, d, acc);
  }
  // lane[j] += lane[j + s] for s = 4, 2, 1.
  const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
  const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
  return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}

GRIDQ_AVX512_WARNINGS_ON
#pragma GCC pop_options

}  // namespace gridq::runtime::cpu

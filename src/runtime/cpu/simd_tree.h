// The reference order's final sum of 16 lanes (lo = lanes 0-7, hi = 8-15): lane[j] += lane[j + s] for
// s = 8, 4, 2, 1, in AVX2 registers. Shared by the dense and the codebook dot kernels.
#pragma once

#include <immintrin.h>

namespace gridq::runtime::cpu {

__attribute__((target("avx2"))) inline float tree16_avx2(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

}  // namespace gridq::runtime::cpu

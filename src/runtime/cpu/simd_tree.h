// The reference order's final sum of 16 lanes (lo = lanes 0-7, hi = 8-15): lane[j] += lane[j + s] for
// s = 8, 4, 2, 1, in AVX2 registers, and the same tree on four zmm accumulators at once. Shared by the
// dense, codebook and BF16 dot kernels.
#pragma once

#include <immintrin.h>

// Around AVX-512 code: GCC 12 reports the self-initialised _mm512_undefined_ps() inside its own shuffle and
// permute intrinsics as uninitialised (a false positive of the header, not of the code using them).
#define GRIDQ_AVX512_WARNINGS_OFF                                                      \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define GRIDQ_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")

namespace gridq::runtime::cpu {

__attribute__((target("avx2"))) inline float tree16_avx2(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// out[k] = the tree of accumulator k (a, b, c, d): each level adds lane j and lane j + s of every
// accumulator, exactly the pairs tree16_avx2 adds, only four accumulators at a time: s = 8 pairs 256-bit
// halves, s = 4 128-bit quarters, s = 2 and 1 lanes within a quarter.
__attribute__((target("avx512f"))) inline __m128 tree16x4_avx512(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // Quarter k holds accumulator k's lanes j + (j + 4) for j < 4.
  const __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  const __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, 0x4E));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2, 0xB1));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s1));
}

}  // namespace gridq::runtime::cpu

// The fast path's kernels (bf16_dot.h): a register tile of 4 weight rows × NT ≤ 4 tokens, one zmm
// accumulator per (row, token), 32 columns per step (one 64-byte load per row and per token, NT·4
// VDPBF16PS). Bound: VDPBF16PS issue at prefill (16 of them per 8 loads), weight bandwidth at decode.
#include "runtime/cpu/bf16_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/numerics.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/simd_tree.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

bool have_avx512_bf16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

bool have_avx512_vbmi() {
  static const bool ok = have_avx512_bf16() && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
GRIDQ_AVX512_WARNINGS_OFF

namespace {

constexpr int64_t kStep = 32;  // columns per VDPBF16PS (16 lanes × a pair)

inline __mmask32 first(int64_t n) { return static_cast<__mmask32>((uint64_t{1} << n) - 1); }

// How a row type becomes 32 BF16 values per step (kTail: only the first n < 32 columns, zeros after).
struct Bf16Rows {
  using T = uint16_t;
  template <bool kTail>
  static __m512bh load(const uint16_t* p, int64_t n) {
    if constexpr (kTail) return (__m512bh)_mm512_maskz_loadu_epi16(first(n), p);
    return (__m512bh)_mm512_loadu_si512(p);
  }
};
// E4M3 codes as BF16 (exact: 4 significant bits, exponents 2^-9 .. 2^8) through a 128-entry table of the
// magnitudes, looked up 32 at a time by two two-register word permutes, the sign bit moved over after.
// Code 0x7F's entry is a quiet NaN, so a row holding a NaN code gives NaN, as the reference's does.
struct E4m3Rows {
  using T = uint8_t;
  alignas(64) static inline const std::array<uint16_t, 128> kTable = [] {
    std::array<uint16_t, 128> t{};
    for (int m = 0; m < 128; ++m)
      t[static_cast<size_t>(m)] = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(m)));
    return t;
  }();
  template <bool kTail>
  static __m512bh load(const uint8_t* p, int64_t n) {
    __m256i b8;
    if constexpr (kTail)
      b8 = _mm256_maskz_loadu_epi8(first(n), p);
    else
      b8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i b = _mm512_cvtepu8_epi16(b8);
    const __m512i* t = reinterpret_cast<const __m512i*>(kTable.data());
    // Index bits 0-5 pick among 64 entries of a table pair; bit 6 picks the pair.
    const __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), b, _mm512_load_si512(t + 1));
    const __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 2), b, _mm512_load_si512(t + 3));
    const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(b, _mm512_set1_epi16(0x40)), lo, hi);
    // mag | ((b << 8) & 0x8000): the sign.
    return (__m512bh)_mm512_ternarylogic_epi32(mag, _mm512_slli_epi16(b, 8),
                                               _mm512_set1_epi16(static_cast<int16_t>(0x8000)), 0xF8);
  }
};

// E4M3 rows 64 codes at a time where the CPU has AVX512-VBMI (have_avx512_vbmi): the table's low and high
// bytes looked up by one 128-entry byte permute each, the sign moved over, the words put back in column
// order. The bits of two E4m3Rows::load calls in a third of the instructions.
#define GRIDQ_VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi")))

alignas(64) const std::array<uint8_t, 256> kE4m3Planes = [] {  // [low bytes x 128 | high bytes x 128]
  std::array<uint8_t, 256> t{};
  for (size_t m = 0; m < 128; ++m) {
    t[m] = static_cast<uint8_t>(E4m3Rows::kTable[m] & 0xFF);
    t[128 + m] = static_cast<uint8_t>(E4m3Rows::kTable[m] >> 8);
  }
  return t;
}();

// w[0] = columns 0-31, w[1] = columns 32-63 of the 64 codes at p.
GRIDQ_VBMI_TARGET inline void e4m3_load64(const uint8_t* p, __m512bh w[2]) {
  const __m512i* t = reinterpret_cast<const __m512i*>(kE4m3Planes.data());
  const __m512i b = _mm512_loadu_si512(p);
  const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(t), b, _mm512_load_si512(t + 1));
  const __m512i hi = _mm512_ternarylogic_epi32(
      _mm512_permutex2var_epi8(_mm512_load_si512(t + 2), b, _mm512_load_si512(t + 3)), b,
      _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  // The byte unpack works per 128-bit lane: u0 holds columns 16q .. 16q + 7 in lane q, u1 16q + 8 .. 16q
  // + 15.
  const __m512i u0 = _mm512_unpacklo_epi8(lo, hi), u1 = _mm512_unpackhi_epi8(lo, hi);
  w[0] = (__m512bh)_mm512_permutex2var_epi64(u0, _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), u1);
  w[1] = (__m512bh)_mm512_permutex2var_epi64(u0, _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15), u1);
}

template <bool kTail>
inline __m512bh load_x(const uint16_t* p, int64_t n) {
  return Bf16Rows::load<kTail>(p, n);
}

template <typename W, int NT, bool kTail>
inline void step(const typename W::T* const* w, int64_t C, const uint16_t* xb, int64_t c,
                 __m512 (&acc)[4][NT]) {
  __m512bh x[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) x[t] = load_x<kTail>(xb + t * C + c, C - c);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    const __m512bh wr = W::template load<kTail>(w[r] + c, C - c);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wr, x[t]);
  }
}

// Rows w[0..3] (C columns each) against NT tokens xb[t·C ..]: y[t·ldy + i] for i < nr.
template <typename W, int NT>
void tile(const typename W::T* const* w, int64_t C, int nr, const uint16_t* xb, float* y, int64_t ldy) {
  __m512 acc[4][NT];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + kStep <= C; c += kStep) step<W, NT, false>(w, C, xb, c, acc);
  if (c < C) step<W, NT, true>(w, C, xb, c, acc);
  // A masked store of the nr rows (a copy loop here became a memcpy call per token).
  const __mmask8 rows = static_cast<__mmask8>((1u << nr) - 1);
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
    _mm_mask_storeu_ps(y + t * ldy, rows, tree16x4_avx512(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
}

// Decode: one row at a time, front to back, the next kilobyte prefetched into L2: out of cache one
// sequential stream is read faster than interleaved ones (measured here, one core, 512-column rows: 21.5
// GB/s from DRAM one row at a time, 12.8 two rows, 11.8 four; in L3 all three at ~57 GB/s), and one
// accumulator chain still outruns both. The same per-output order as tile().
constexpr int64_t kDecodePrefetchBytes = 1024;

template <typename W, int NT>
void rows_one_by_one(const typename W::T* w, int64_t C, int nr, const uint16_t* xb, float* y, int64_t ldy) {
  for (int i = 0; i < nr; ++i) {
    const typename W::T* wr = w + i * C;
    __m512 acc[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    auto step1 = [&]<bool kTail>(int64_t c) {
      const __m512bh wv = W::template load<kTail>(wr + c, C - c);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_dpbf16_ps(acc[t], wv, load_x<kTail>(xb + t * C + c, C - c));
    };
    int64_t c = 0;
    for (; c + kStep <= C; c += kStep) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + c) + kDecodePrefetchBytes, _MM_HINT_T2);
      step1.template operator()<false>(c);
    }
    if (c < C) step1.template operator()<true>(c);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      y[t * ldy + i] = _mm_cvtss_f32(tree16x4_avx512(acc[t], acc[t], acc[t], acc[t]));
  }
}

// rows_one_by_one for E4M3 rows through e4m3_load64 (the same steps in the same order, so the same bits). Its
// own function: the VBMI target must cover the whole loop for e4m3_load64 to inline, and no other code of
// this file may take VBMI instructions (they would fault on an AVX512-BF16 CPU without them).
template <int NT>
GRIDQ_VBMI_TARGET void e4m3_rows_vbmi(const uint8_t* w, int64_t C, int nr, const uint16_t* xb, float* y,
                                      int64_t ldy) {
  for (int i = 0; i < nr; ++i) {
    const uint8_t* wr = w + i * C;
    __m512 acc[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 2 * kStep <= C; c += 2 * kStep) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + c) + kDecodePrefetchBytes, _MM_HINT_T2);
      __m512bh wv[2];
      e4m3_load64(wr + c, wv);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[t] = _mm512_dpbf16_ps(acc[t], wv[0], load_x<false>(xb + t * C + c, 0));
        acc[t] = _mm512_dpbf16_ps(acc[t], wv[1], load_x<false>(xb + t * C + c + kStep, 0));
      }
    }
    auto step1 = [&]<bool kTail>(int64_t c) {
      const __m512bh wv = E4m3Rows::load<kTail>(wr + c, C - c);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm512_dpbf16_ps(acc[t], wv, load_x<kTail>(xb + t * C + c, C - c));
    };
    for (; c + kStep <= C; c += kStep) step1.template operator()<false>(c);
    if (c < C) step1.template operator()<true>(c);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      y[t * ldy + i] = _mm_cvtss_f32(tree16x4_avx512(acc[t], acc[t], acc[t], acc[t]));
  }
}

// An E4M3 row's first C64 (a multiple of 64) columns widened to BF16 into out.
GRIDQ_VBMI_TARGET void e4m3_widen_vbmi(const uint8_t* w, int64_t C64, uint16_t* out) {
  for (int64_t c = 0; c < C64; c += 2 * kStep) {
    __m512bh wv[2];
    e4m3_load64(w + c, wv);
    _mm512_storeu_si512(out + c, (__m512i)wv[0]);
    _mm512_storeu_si512(out + c + kStep, (__m512i)wv[1]);
  }
}

template <typename W>
void dot_rows(const typename W::T* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
              int64_t ldy);

// Prefill over E4M3 rows: the block's rows widened to BF16 once (exact), then the BF16 tiles, instead of
// converting every step again for every 4 tokens. The same bits: the tile sees the same BF16 values.
void e4m3_prefill(const uint8_t* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y, int64_t ldy) {
  thread_local LineVector<uint16_t> rows;  // [4, C]
  rows.resize(static_cast<size_t>(4 * C));
  for (int i = 0; i < nr; ++i) {
    int64_t c = 0;
    if (have_avx512_vbmi()) {
      c = C / (2 * kStep) * (2 * kStep);
      e4m3_widen_vbmi(w + i * C, c, rows.data() + i * C);
    }
    for (; c + kStep <= C; c += kStep)
      _mm512_storeu_si512(rows.data() + i * C + c, (__m512i)E4m3Rows::load<false>(w + i * C + c, 0));
    if (c < C)
      _mm512_mask_storeu_epi16(rows.data() + i * C + c, first(C - c),
                               (__m512i)E4m3Rows::load<true>(w + i * C + c, C - c));
  }
  dot_rows<Bf16Rows>(rows.data(), C, nr, xb, T, y, ldy);
}

template <typename W>
void dot_rows(const typename W::T* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
              int64_t ldy) {
  if constexpr (std::is_same_v<W, E4m3Rows>) {
    if (T < 4 && have_avx512_vbmi()) {
      if (T == 1) return e4m3_rows_vbmi<1>(w, C, nr, xb, y, ldy);
      if (T == 2) return e4m3_rows_vbmi<2>(w, C, nr, xb, y, ldy);
      return e4m3_rows_vbmi<3>(w, C, nr, xb, y, ldy);
    }
  }
  switch (T) {  // decode
    case 1:
      return rows_one_by_one<W, 1>(w, C, nr, xb, y, ldy);
    case 2:
      return rows_one_by_one<W, 2>(w, C, nr, xb, y, ldy);
    case 3:
      return rows_one_by_one<W, 3>(w, C, nr, xb, y, ldy);
    default:
      break;
  }
  if constexpr (std::is_same_v<W, E4m3Rows>) return e4m3_prefill(w, C, nr, xb, T, y, ldy);
  // Rows past nr repeat the last one (computed, never stored): one tile shape for every block.
  const typename W::T* rows[4];
  for (int i = 0; i < 4; ++i) rows[i] = w + (i < nr ? i : nr - 1) * C;
  int64_t t = 0;
  for (; t + 4 <= T; t += 4) tile<W, 4>(rows, C, nr, xb + t * C, y + t * ldy, ldy);
  switch (T - t) {
    case 3:
      return tile<W, 3>(rows, C, nr, xb + t * C, y + t * ldy, ldy);
    case 2:
      return tile<W, 2>(rows, C, nr, xb + t * C, y + t * ldy, ldy);
    case 1:
      return tile<W, 1>(rows, C, nr, xb + t * C, y + t * ldy, ldy);
    default:
      return;
  }
}

}  // namespace

void round_to_bf16(const float* x, int64_t n, uint16_t* xb) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {  // the tail through the same instruction, so every element rounds alike
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(xb + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

namespace {

// exp(x) for 16 lanes: x = n·ln2 + r, |r| ≤ ln2/2 (ln2 in two parts, so r is exact to a few ulp), e^r by
// its Taylor polynomial to degree 6 (truncation < 2^-26 relative there), times 2^n by VSCALEFPS. Inputs are
// clamped to [-104, 88.7]: below, the result is 0 or a subnormal flushed by the scale; above, +inf.
__m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.72f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);  // ln2's high part: exact product
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

void silu_mul_fast(float* hg, const float* hu, int64_t n) {
  auto body = [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i < e; i += 16) {
      const __mmask16 m = e - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (e - i)) - 1);
      const __m512 z = _mm512_maskz_loadu_ps(m, hg + i);
      const __m512 s =
          _mm512_div_ps(z, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), z))));
      _mm512_mask_storeu_ps(hg + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, hu + i)));
    }
  };
  // Chunks of 1,024 values: fixed by n, so the split never depends on the thread count (elementwise anyway).
  if (n >= 8192)
    parallel_for((n + 1023) / 1024, [&](int64_t b, int64_t e) { body(b * 1024, std::min(n, e * 1024)); });
  else
    body(0, n);
}

void softmax_fast(float* s, int64_t n) {
  auto mask = [&](int64_t i) {
    return n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
  };
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, mask(i), s + i));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask(i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m));
    _mm512_mask_storeu_ps(s + i, k, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm_cvtss_f32(tree16x4_avx512(sum, sum, sum, sum)));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = mask(i);
    _mm512_mask_storeu_ps(s + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), inv));
  }
}

void bf16_dot_rows(const uint16_t* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
                   int64_t ldy) {
  dot_rows<Bf16Rows>(w, C, nr, xb, T, y, ldy);
}

void bf16_dot_rows_e4m3(const uint8_t* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
                        int64_t ldy) {
  dot_rows<E4m3Rows>(w, C, nr, xb, T, y, ldy);
}

GRIDQ_AVX512_WARNINGS_ON
#pragma GCC pop_options

}  // namespace gridq::runtime::cpu

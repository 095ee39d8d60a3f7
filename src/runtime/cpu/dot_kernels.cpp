// The reference-order dot products (dot_kernels.h). The AVX2 kernels keep the 16 lanes as two __m256
// accumulators per row (lo: lanes 0-7, hi: 8-15); a row's element type only changes how 8 weights become
// 8 fp32 values (exactly) before the product.
#include "runtime/cpu/dot_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>

#include "core/numerics.h"
#include "runtime/cpu/dot_kernels_avx512.h"
#include "runtime/cpu/simd_tree.h"

namespace gridq::runtime::cpu {

namespace {

constexpr int kLanes = 16;

// Scalar forms of the order, for machines without AVX2 and for tails.
template <typename Get>
float dot_scalar(Get w, const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += w(i + j) * x[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += w(i) * x[i];
  for (int s = kLanes / 2; s > 0; s /= 2)
    for (int j = 0; j < s; ++j) acc[j] += acc[j + s];
  return acc[0];
}

}  // namespace

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
}

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace {

struct F32 {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float at(const float* p, int64_t i) { return p[i]; }
};
struct Bf16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float at(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }
};
// E4M3 as the FP16 with the same sign, exponent and mantissa bits (exponent bias 15 instead of 7, so the
// value times 2^-8, subnormals included), widened by F16C and scaled back by 2^8: exact. Codes 0x7F/0xFF
// are NaN in E4M3 (not 480 as in FP16).
struct E4m3 {
  using T = uint8_t;
  static __m256 load(const uint8_t* p) {
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7F));
    const __m128i h =
        _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8), _mm_slli_epi16(mag, 7));
    const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F))));
    const __m256 signed_nan = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                           _mm256_set1_ps(std::bit_cast<float>(0x7FC00000u)));
    return _mm256_blendv_ps(v, signed_nan, nan);
  }
  static float at(const uint8_t* p, int64_t i) { return e4m3_to_f32(p[i]); }
};

// A tail (n % 16 columns from i): lanes 0.. take it, then the tree in scalar form.
template <typename L>
float finish_tail(__m256 lo, __m256 hi, const typename L::T* w, const float* x, int64_t i, int64_t n) {
  float a[kLanes];
  _mm256_storeu_ps(a, lo);
  _mm256_storeu_ps(a + 8, hi);
  for (int64_t k = i, j = 0; k < n; ++k, ++j) a[j] += L::at(w, k) * x[k];
  for (int s = kLanes / 2; s > 0; s /= 2)
    for (int j = 0; j < s; ++j) a[j] += a[j + s];
  return a[0];
}

template <typename L>
float dot1_avx2(const typename L::T* w, const float* x, int64_t n, int64_t pf = 0) {
  __m256 lo = _mm256_setzero_ps(), hi = lo;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    constexpr int64_t kLine = 64 / sizeof(typename L::T);  // elements per cache line
    if (pf > 0 && i % kLine == 0) _mm_prefetch(reinterpret_cast<const char*>(w + i + pf), _MM_HINT_T0);
    lo = _mm256_add_ps(lo, _mm256_mul_ps(L::load(w + i), _mm256_loadu_ps(x + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(L::load(w + i + 8), _mm256_loadu_ps(x + i + 8)));
  }
  return i < n ? finish_tail<L>(lo, hi, w, x, i, n) : tree16_avx2(lo, hi);
}

// Four rows: x loaded once, eight independent accumulator chains hide the add latency that bounds a
// single dot. Named accumulators (an array of __m256 ends up on the stack).
//
// pf > 0: also prefetch the rows pf elements further on, one cache line per row every 64 bytes. At decode
// the next block's rows are 4 rows on (pf = 4·n): out of cache, four interleaved row streams are read
// slower than one sequential stream (the hardware prefetcher does not keep up), and this restores it.
template <typename L>
void dot4_avx2(const typename L::T* const* w, const float* x, int64_t n, float* y, int64_t pf = 0) {
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
         a31 = a00;
  const typename L::T *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    constexpr int64_t kLine = 64 / sizeof(typename L::T);  // elements per cache line
    if (pf > 0 && i % kLine == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w2 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w3 + i + pf), _MM_HINT_T0);
    }
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    a00 = _mm256_add_ps(a00, _mm256_mul_ps(L::load(w0 + i), x0));
    a01 = _mm256_add_ps(a01, _mm256_mul_ps(L::load(w0 + i + 8), x1));
    a10 = _mm256_add_ps(a10, _mm256_mul_ps(L::load(w1 + i), x0));
    a11 = _mm256_add_ps(a11, _mm256_mul_ps(L::load(w1 + i + 8), x1));
    a20 = _mm256_add_ps(a20, _mm256_mul_ps(L::load(w2 + i), x0));
    a21 = _mm256_add_ps(a21, _mm256_mul_ps(L::load(w2 + i + 8), x1));
    a30 = _mm256_add_ps(a30, _mm256_mul_ps(L::load(w3 + i), x0));
    a31 = _mm256_add_ps(a31, _mm256_mul_ps(L::load(w3 + i + 8), x1));
  }
  const __m256 lo[4] = {a00, a10, a20, a30}, hi[4] = {a01, a11, a21, a31};
  for (int r = 0; r < 4; ++r)
    y[r] = i < n ? finish_tail<L>(lo[r], hi[r], w[r], x, i, n) : tree16_avx2(lo[r], hi[r]);
}

// E4M3 rows against x256 = 256·x (exact): sixteen codes become FP16 in one pass — the code in the high
// byte of a 16-bit lane, shifted right by one with the sign copied, bit 14 cleared: sign, exponent and
// mantissa land in FP16's fields with bias 15 instead of 7, i.e. the value times 2^-8, subnormals
// included — and F16C widens them. (w·2^-8)·(256·x) is the same real product as w·x, so every product and
// sum rounds as in the reference. Codes 0x7F/0xFF (NaN in E4M3) are only detected: false means the row
// holds one and y is not set (the caller takes the scalar path).
template <int N>
bool dot_e4m3_x256_avx2(const uint8_t* const* w, const float* x256, int64_t n, float* y, int64_t pf) {
  __m256 lo[N], hi[N];
  __m256i nan = _mm256_setzero_si256();
  for (int r = 0; r < N; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  const __m256i m7f = _mm256_set1_epi16(0x7F), keep = _mm256_set1_epi16(static_cast<int16_t>(0xBFFF));
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 x0 = _mm256_loadu_ps(x256 + i), x1 = _mm256_loadu_ps(x256 + i + 8);
#pragma GCC unroll 4
    for (int r = 0; r < N; ++r) {
      if (pf > 0 && i % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(w[r] + i + pf), _MM_HINT_T0);
      const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r] + i)));
      nan = _mm256_or_si256(nan, _mm256_cmpeq_epi16(_mm256_and_si256(b, m7f), m7f));
      const __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 1), keep);
      lo[r] = _mm256_add_ps(lo[r], _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), x0));
      hi[r] = _mm256_add_ps(hi[r], _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), x1));
    }
  }
  if (!_mm256_testz_si256(nan, nan)) return false;
  for (int r = 0; r < N; ++r) {
    if (i == n) {
      y[r] = tree16_avx2(lo[r], hi[r]);
      continue;
    }
    float a[kLanes];  // a tail: as finish_tail, with x = x256 / 256 (exact)
    _mm256_storeu_ps(a, lo[r]);
    _mm256_storeu_ps(a + 8, hi[r]);
    for (int64_t k = i, j = 0; k < n; ++k, ++j) {
      if ((w[r][k] & 0x7F) == 0x7F) return false;
      a[j] += e4m3_to_f32(w[r][k]) * (x256[k] * (1.0f / 256.0f));
    }
    for (int s = kLanes / 2; s > 0; s /= 2)
      for (int j = 0; j < s; ++j) a[j] += a[j + s];
    y[r] = a[0];
  }
  return true;
}

void widen_bf16_avx2(const uint16_t* in, float* out, int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) _mm256_storeu_ps(out + c, Bf16::load(in + c));
  for (; c < n; ++c) out[c] = bf16_to_f32(in[c]);
}

void widen_e4m3_avx2(const uint8_t* in, float* out, int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) _mm256_storeu_ps(out + c, E4m3::load(in + c));
  for (; c < n; ++c) out[c] = e4m3_to_f32(in[c]);
}

// out = Σ_j a[j]·v[j] as axpy calls from out = 0 would compute it (j ascending, product then sum per
// element), with 64 outputs held in registers across all j instead of re-read and re-written per j.
void weighted_sum_avx2(const float* a, const float* const* v, int64_t nv, int64_t d, float* out) {
  int64_t e = 0;
  for (; e + 64 <= d; e += 64) {
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0, o4 = o0, o5 = o0, o6 = o0, o7 = o0;
    for (int64_t j = 0; j < nv; ++j) {
      const __m256 aj = _mm256_set1_ps(a[j]);
      const float* vj = v[j] + e;
      o0 = _mm256_add_ps(o0, _mm256_mul_ps(aj, _mm256_loadu_ps(vj)));
      o1 = _mm256_add_ps(o1, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 8)));
      o2 = _mm256_add_ps(o2, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 16)));
      o3 = _mm256_add_ps(o3, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 24)));
      o4 = _mm256_add_ps(o4, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 32)));
      o5 = _mm256_add_ps(o5, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 40)));
      o6 = _mm256_add_ps(o6, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 48)));
      o7 = _mm256_add_ps(o7, _mm256_mul_ps(aj, _mm256_loadu_ps(vj + 56)));
    }
    _mm256_storeu_ps(out + e, o0);
    _mm256_storeu_ps(out + e + 8, o1);
    _mm256_storeu_ps(out + e + 16, o2);
    _mm256_storeu_ps(out + e + 24, o3);
    _mm256_storeu_ps(out + e + 32, o4);
    _mm256_storeu_ps(out + e + 40, o5);
    _mm256_storeu_ps(out + e + 48, o6);
    _mm256_storeu_ps(out + e + 56, o7);
  }
  for (; e < d; ++e) {
    float o = 0.0f;
    for (int64_t j = 0; j < nv; ++j) o += a[j] * v[j][e];
    out[e] = o;
  }
}

// y += a·x elementwise: a product, then a sum, per element (no FMA), so every path rounds alike.
void axpy_avx2(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

#pragma GCC pop_options

bool have_avx512() {
  static const bool ok =
      have_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return ok;
}

float dot(const float* a, const float* b, int64_t n) {
  if (have_avx2()) return dot1_avx2<F32>(a, b, n);
  return dot_scalar([a](int64_t i) { return a[i]; }, b, n);
}

void dot4(const float* x, const float* const* w, int64_t n, float* y) {
  if (have_avx512() && n % kLanes == 0) return dot4_f32_avx512(w, x, n, y);
  if (have_avx2()) return dot4_avx2<F32>(w, x, n, y);
  for (int r = 0; r < 4; ++r) y[r] = dot(w[r], x, n);
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n, int64_t pf) {
  if (have_avx2()) return dot1_avx2<Bf16>(w, x, n, pf);
  return dot_scalar([w](int64_t i) { return bf16_to_f32(w[i]); }, x, n);
}

void dot4_bf16(const float* x, const uint16_t* const* w, int64_t n, float* y, int64_t pf) {
  if (have_avx512() && n % kLanes == 0) return dot4_bf16_avx512(w, x, n, y, pf);
  if (have_avx2()) return dot4_avx2<Bf16>(w, x, n, y, pf);
  for (int r = 0; r < 4; ++r) y[r] = dot_bf16(w[r], x, n);
}

float dot_e4m3(const uint8_t* w, const float* x, int64_t n, int64_t pf) {
  if (have_avx2()) return dot1_avx2<E4m3>(w, x, n, pf);
  return dot_scalar([w](int64_t i) { return e4m3_to_f32(w[i]); }, x, n);
}

void dot4_e4m3(const float* x, const uint8_t* const* w, int64_t n, float* y, int64_t pf) {
  if (have_avx2()) return dot4_avx2<E4m3>(w, x, n, y, pf);
  for (int r = 0; r < 4; ++r) y[r] = dot_e4m3(w[r], x, n);
}

void dot_e4m3_x256(const uint8_t* const* w, int rows, const float* x, const float* x256, int64_t n, float* y,
                   int64_t pf) {
  if (have_avx2()) {
    if (rows == 4 && dot_e4m3_x256_avx2<4>(w, x256, n, y, pf)) return;
    if (rows != 4) {
      int r = 0;
      for (; r < rows; ++r)
        if (!dot_e4m3_x256_avx2<1>(w + r, x256, n, y + r, pf)) break;
      if (r == rows) return;
    }
  }
  for (int r = 0; r < rows; ++r) y[r] = dot_e4m3(w[r], x, n);  // NaN codes, or no AVX2: the plain order
}

void widen_bf16(const uint16_t* in, float* out, int64_t n) {
  if (have_avx2()) return widen_bf16_avx2(in, out, n);
  for (int64_t c = 0; c < n; ++c) out[c] = bf16_to_f32(in[c]);
}

void widen_e4m3(const uint8_t* in, float* out, int64_t n) {
  if (have_avx2()) return widen_e4m3_avx2(in, out, n);
  for (int64_t c = 0; c < n; ++c) out[c] = e4m3_to_f32(in[c]);
}

void weighted_sum(const float* a, const float* const* v, int64_t nv, int64_t d, float* out) {
  if (have_avx512()) return weighted_sum_avx512(a, v, nv, d, out);
  if (have_avx2()) return weighted_sum_avx2(a, v, nv, d, out);
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < nv; ++j)
    for (int64_t e = 0; e < d; ++e) out[e] += a[j] * v[j][e];
}

void axpy(float a, const float* x, float* y, int64_t n) {
  if (have_avx2()) return axpy_avx2(a, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void dot4_heads(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n, float* s) {
  if (have_avx512() && n % kLanes == 0 && nq >= 1 && nq <= kHeadsPerPass)
    return dot4_heads_avx512(q, nq, k, nk, n, s);
  for (int i = 0; i < nq; ++i) dot4(q[i], k, n, s + 4 * i);
}

void weighted_sum_heads(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                        float* const* out) {
  if (have_avx512() && nq >= 1 && nq <= kHeadsPerPass) return weighted_sum_heads_avx512(a, nq, v, nv, d, out);
  for (int i = 0; i < nq; ++i) weighted_sum(a[i], v, nv, d, out[i]);
}

}  // namespace gridq::runtime::cpu

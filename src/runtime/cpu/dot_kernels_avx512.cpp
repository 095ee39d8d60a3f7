// The AVX-512 forms of the reference-order kernels (dot_kernels_avx512.h): the 16 lanes of the order in
// one zmm, so the same products and sums as the AVX2 kernels with half the instructions and the four
// trees in one pass. Compiled for AVX-512F/BW; called only when have_avx512().
#include "runtime/cpu/dot_kernels_avx512.h"

#include <immintrin.h>

#include <bit>

#include "runtime/cpu/simd_tree.h"

namespace gridq::runtime::cpu {

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,f16c")
// AVX-512F brings FMA with it, and GCC would fuse a product and its sum (vector intrinsics and scalar
// tails alike): the order wants them rounded apart.
#pragma GCC optimize("fp-contract=off")
GRIDQ_AVX512_WARNINGS_OFF

namespace {

constexpr int kLanes = 16;
constexpr int kRowsAhead = 8;  // rows of a KV cache requested ahead of their use

// The 16 lanes of the order in one zmm (lane j = lane j of the AVX2 kernels' lo|hi): the same products
// and sums, half the instructions, and the four trees in one pass (tree16x4_avx512).
struct F32z {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static float at(const float* p) { return *p; }
};
struct Bf16z {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static float at(const uint16_t* p) { return std::bit_cast<float>(static_cast<uint32_t>(*p) << 16); }
};

template <typename L>
void dot4_avx512(const typename L::T* const* w, const float* x, int64_t n, float* y, int64_t pf = 0) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  const typename L::T *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  for (int64_t i = 0; i < n; i += kLanes) {
    constexpr int64_t kLine = 64 / sizeof(typename L::T);  // elements per cache line
    if (pf > 0 && i % kLine == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w2 + i + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w3 + i + pf), _MM_HINT_T0);
    }
    const __m512 xv = _mm512_loadu_ps(x + i);
    a0 = _mm512_add_ps(a0, _mm512_mul_ps(L::load(w0 + i), xv));
    a1 = _mm512_add_ps(a1, _mm512_mul_ps(L::load(w1 + i), xv));
    a2 = _mm512_add_ps(a2, _mm512_mul_ps(L::load(w2 + i), xv));
    a3 = _mm512_add_ps(a3, _mm512_mul_ps(L::load(w3 + i), xv));
  }
  _mm_storeu_ps(y, tree16x4_avx512(a0, a1, a2, a3));
}

// weighted_sum (the AVX2 form) with 128 outputs held in eight zmm registers; each output element still takes
// its products and sums in j order.
void weighted_sum_1_avx512(const float* a, const float* const* v, int64_t nv, int64_t d, float* out) {
  int64_t e = 0;
  for (; e + 128 <= d; e += 128) {
    __m512 o[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) o[k] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nv; ++j) {
      const __m512 aj = _mm512_set1_ps(a[j]);
      const float* vj = v[j] + e;
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) o[k] = _mm512_add_ps(o[k], _mm512_mul_ps(aj, _mm512_loadu_ps(vj + 16 * k)));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) _mm512_storeu_ps(out + e + 16 * k, o[k]);
  }
  for (; e + 16 <= d; e += 16) {
    __m512 o = _mm512_setzero_ps();
    for (int64_t j = 0; j < nv; ++j)
      o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_set1_ps(a[j]), _mm512_loadu_ps(v[j] + e)));
    _mm512_storeu_ps(out + e, o);
  }
  for (; e < d; ++e) {
    float o = 0.0f;
    for (int64_t j = 0; j < nv; ++j) o += a[j] * v[j][e];
    out[e] = o;
  }
}

// acc + a·b: rounded apart (the reference order) or fused (the fast path's attention, fewer instructions).
template <bool kFused>
inline __m512 madd(__m512 acc, __m512 a, __m512 b) {
  if constexpr (kFused) return _mm512_fmadd_ps(a, b, acc);
  return _mm512_add_ps(acc, _mm512_mul_ps(a, b));
}

// Up to four heads × four keys: 16 accumulators, each key and query chunk loaded once per step.
// Keys and values are fp32 (F32z) or BF16 (Bf16z: the fast path's KV cache, widened exactly on load).
template <typename L, int NQ, bool kFused>
void dot4_heads_n(const float* const* q, const typename L::T* const* k, int64_t nk, int64_t n, float* s) {
  __m512 acc[NQ][4];
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += kLanes) {
    // The keys kRowsAhead rows on (k[4..]: the caller passes the pointer list's tail), this line of each.
    for (int r = 4; r < 4 + kRowsAhead && r < nk; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(k[r] + c), _MM_HINT_T0);
    __m512 kv[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) kv[r] = L::load(k[r] + c);
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i) {
      const __m512 qv = _mm512_loadu_ps(q[i] + c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) acc[i][r] = madd<kFused>(acc[i][r], kv[r], qv);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NQ; ++i)
    _mm_storeu_ps(s + 4 * i, tree16x4_avx512(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
}

// Up to four heads' value sums over the same rows, 64 outputs of each at a time (16 accumulators).
template <typename L, int NQ, bool kFused>
void weighted_sum_heads_n(const float* const* a, const typename L::T* const* v, int64_t nv, int64_t d,
                          float* const* out) {
  int64_t e = 0;
  for (; e + 64 <= d; e += 64) {
    __m512 o[NQ][4];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) o[i][u] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nv; ++j) {
      // The rows are a cache's (strided, often out of the last-level cache at decode): ask for a later
      // row's four lines now; the hardware prefetcher does not follow a list of row pointers.
      if (j + kRowsAhead < nv)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u)
          _mm_prefetch(reinterpret_cast<const char*>(v[j + kRowsAhead] + e + 16 * u), _MM_HINT_T0);
      __m512 vv[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) vv[u] = L::load(v[j] + e + 16 * u);
#pragma GCC unroll 4
      for (int i = 0; i < NQ; ++i) {
        const __m512 aj = _mm512_set1_ps(a[i][j]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) o[i][u] = madd<kFused>(o[i][u], aj, vv[u]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; ++i)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) _mm512_storeu_ps(out[i] + e + 16 * u, o[i][u]);
  }
  for (; e < d; ++e)
    for (int i = 0; i < NQ; ++i) {
      float o = 0.0f;
      for (int64_t j = 0; j < nv; ++j) o += a[i][j] * L::at(v[j] + e);
      out[i][e] = o;
    }
}

}  // namespace

void dot4_f32_avx512(const float* const* w, const float* x, int64_t n, float* y) {
  dot4_avx512<F32z>(w, x, n, y);
}

void dot4_bf16_avx512(const uint16_t* const* w, const float* x, int64_t n, float* y, int64_t pf) {
  dot4_avx512<Bf16z>(w, x, n, y, pf);
}

void weighted_sum_avx512(const float* a, const float* const* v, int64_t nv, int64_t d, float* out) {
  weighted_sum_1_avx512(a, v, nv, d, out);
}

// f.template operator()<NQ>() with NQ = nq, 1 ≤ nq ≤ kHeadsPerPass: the head count as a template argument.
template <class F>
void with_heads(int nq, F&& f) {
  switch (nq) {
    case 4:
      return f.template operator()<4>();
    case 3:
      return f.template operator()<3>();
    case 2:
      return f.template operator()<2>();
    default:
      return f.template operator()<1>();
  }
}

template <typename L, bool kFused>
void dot4_heads_any(const float* const* q, int nq, const typename L::T* const* k, int64_t nk, int64_t n,
                    float* s) {
  with_heads(nq, [&]<int NQ>() { dot4_heads_n<L, NQ, kFused>(q, k, nk, n, s); });
}

template <typename L, bool kFused>
void weighted_sum_heads_any(const float* const* a, int nq, const typename L::T* const* v, int64_t nv,
                            int64_t d, float* const* out) {
  with_heads(nq, [&]<int NQ>() { weighted_sum_heads_n<L, NQ, kFused>(a, v, nv, d, out); });
}

void dot4_heads_avx512(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n,
                       float* s) {
  dot4_heads_any<F32z, false>(q, nq, k, nk, n, s);
}

void weighted_sum_heads_avx512(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                               float* const* out) {
  weighted_sum_heads_any<F32z, false>(a, nq, v, nv, d, out);
}

void dot4_heads_fused(const float* const* q, int nq, const float* const* k, int64_t nk, int64_t n, float* s) {
  dot4_heads_any<F32z, true>(q, nq, k, nk, n, s);
}

void weighted_sum_heads_fused(const float* const* a, int nq, const float* const* v, int64_t nv, int64_t d,
                              float* const* out) {
  weighted_sum_heads_any<F32z, true>(a, nq, v, nv, d, out);
}

void dot4_heads_fused(const float* const* q, int nq, const uint16_t* const* k, int64_t nk, int64_t n,
                      float* s) {
  dot4_heads_any<Bf16z, true>(q, nq, k, nk, n, s);
}

void weighted_sum_heads_fused(const float* const* a, int nq, const uint16_t* const* v, int64_t nv, int64_t d,
                              float* const* out) {
  weighted_sum_heads_any<Bf16z, true>(a, nq, v, nv, d, out);
}

GRIDQ_AVX512_WARNINGS_ON
#pragma GCC pop_options

}  // namespace gridq::runtime::cpu

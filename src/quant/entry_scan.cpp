#include "quant/entry_scan.h"

#include <immintrin.h>

#include <cstddef>
#include <limits>

#include "runtime/cpu/dot_kernels.h"

namespace gridq::quant {

double best_entry_all(const double* A, const double* B, int K, double s, int* arg) {
  const double s2 = s * s;
  const double ts = 2.0 * s;
  double best = std::numeric_limits<double>::infinity();
  int bi = 0;
  for (int k = 0; k < K; ++k) {
    const double v = s2 * A[k] - ts * B[k];
    if (v < best) {
      best = v;
      bi = k;
    }
  }
  if (arg) *arg = bi;
  return best;
}

namespace {

#pragma GCC push_options
#pragma GCC target("avx512f")
// The scalar loops' roundings: a product, a product, a difference (AVX-512F brings FMA, which would fuse).
#pragma GCC optimize("fp-contract=off")

double best_entry_avx512(const double* A, const double* B, int K, double s, int* arg) {
  const __m512d s2 = _mm512_set1_pd(s * s), ts = _mm512_set1_pd(2.0 * s);
  __m512d best = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  __m512i bi = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);  // lane j: entries j, j + 8, ... ascending
  __m512i k = bi;
  const __m512i eight = _mm512_set1_epi64(8);
  for (int i = 0; i < K; i += 8) {
    const __m512d v =
        _mm512_sub_pd(_mm512_mul_pd(s2, _mm512_loadu_pd(A + i)), _mm512_mul_pd(ts, _mm512_loadu_pd(B + i)));
    const __mmask8 lt = _mm512_cmp_pd_mask(v, best, _CMP_LT_OQ);  // strict: a lane keeps its lowest k
    best = _mm512_mask_mov_pd(best, lt, v);
    bi = _mm512_mask_mov_epi64(bi, lt, k);
    k = _mm512_add_epi64(k, eight);
  }
  // The minimum over lanes, then the lowest k among the lanes that hold it: the scalar loop's first minimum.
  alignas(64) double bv[8];
  alignas(64) long long bk[8];
  _mm512_store_pd(bv, best);
  _mm512_store_epi64(bk, bi);
  double m = bv[0];
  long long mk = bk[0];
  for (int j = 1; j < 8; ++j)
    if (bv[j] < m || (bv[j] == m && bk[j] < mk)) {
      m = bv[j];
      mk = bk[j];
    }
  if (arg) *arg = static_cast<int>(mk);
  return m;
}

void entry_dots_avx512(const double* Tt, int K, int d, const double* b, double* out) {
  for (int k = 0; k < K; k += 8) {
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < d; ++i)
      acc = _mm512_add_pd(acc, _mm512_mul_pd(_mm512_loadu_pd(Tt + size_t(i) * K + k), _mm512_set1_pd(b[i])));
    _mm512_storeu_pd(out + k, acc);
  }
}

#pragma GCC pop_options

bool vector_form(int K) { return K % 8 == 0 && runtime::cpu::have_avx512(); }

}  // namespace

double best_entry_scan(const double* A, const double* B, int K, double s, int* arg) {
  return vector_form(K) ? best_entry_avx512(A, B, K, s, arg) : best_entry_all(A, B, K, s, arg);
}

void entry_dots(const double* Tt, int K, int d, const double* b, double* out) {
  if (vector_form(K)) return entry_dots_avx512(Tt, K, d, b, out);
  for (int k = 0; k < K; ++k) {
    double dot = 0.0;
    for (int i = 0; i < d; ++i) dot += Tt[size_t(i) * K + k] * b[i];
    out[k] = dot;
  }
}

}  // namespace gridq::quant

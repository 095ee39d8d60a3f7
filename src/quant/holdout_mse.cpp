// holdout_output_mse (cb_gptq.h): per row r of D = Ŵ − W (float64), Σ_t (Σ_j D[r, j]·x[t, j])² with j and t
// ascending from +0, each product rounded before its sum (no FMA: the GPU batch repeats these bits,
// runtime/cuda/gptq/gptq_holdout.cu), then the rows added in order and divided by n·R.
//
// Each y[r, t] is one sequential chain of C products, ~4 cycles apiece when chains run one after another.
// So the chains run side by side: holdout rows in blocks of kT = 8, transposed once to [C, 8] so that one
// vector load gives a column's 8 x values, and kRows = 16 weight rows per task, so that a block read from
// L3 serves 16 rows from L2. Every chain keeps its own order, so the bits are the one-at-a-time loop's.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "quant/cb_gptq.h"
#include "runtime/cpu/dot_kernels.h"

namespace gridq::quant {

namespace {

constexpr int kT = 8;      // holdout rows per block (two 4-double vectors)
constexpr int kRows = 16;  // weight rows per task

// y[i, k] = Σ_j D_i[j]·x[j, k] for two rows (a, b) of D and the 8 holdout rows of block x [C, 8].
// AVX2 without FMA: a product and its sum stay two roundings.
__attribute__((target("avx2"))) void chains_avx2(const double* Da, const double* Db, const double* x, int C,
                                                 double* ya, double* yb) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  __m256d b0 = _mm256_setzero_pd(), b1 = _mm256_setzero_pd();
  for (int j = 0; j < C; ++j) {
    const __m256d x0 = _mm256_loadu_pd(x + size_t(j) * kT), x1 = _mm256_loadu_pd(x + size_t(j) * kT + 4);
    const __m256d da = _mm256_set1_pd(Da[j]), db = _mm256_set1_pd(Db[j]);
    a0 = _mm256_add_pd(a0, _mm256_mul_pd(da, x0));
    a1 = _mm256_add_pd(a1, _mm256_mul_pd(da, x1));
    b0 = _mm256_add_pd(b0, _mm256_mul_pd(db, x0));
    b1 = _mm256_add_pd(b1, _mm256_mul_pd(db, x1));
  }
  _mm256_storeu_pd(ya, a0);
  _mm256_storeu_pd(ya + 4, a1);
  _mm256_storeu_pd(yb, b0);
  _mm256_storeu_pd(yb + 4, b1);
}

// The same chains without AVX2.
void chains_portable(const double* Da, const double* Db, const double* x, int C, double* ya, double* yb) {
  std::fill(ya, ya + kT, 0.0);
  std::fill(yb, yb + kT, 0.0);
  for (int j = 0; j < C; ++j) {
    const double* xj = x + size_t(j) * kT;
    for (int k = 0; k < kT; ++k) {
      ya[k] += Da[j] * xj[k];
      yb[k] += Db[j] * xj[k];
    }
  }
}

}  // namespace

double holdout_output_mse(const float* X, int64_t n, const float* W, const float* W_hat, int R, int C) {
  if (n <= 0 || R <= 0) return 0.0;
  const int64_t nb = (n + kT - 1) / kT;
  // xt[b] = holdout rows 8b..8b+7 as [C, 8] doubles (zero past n: those chains are never added).
  std::vector<double> xt(static_cast<size_t>(nb) * C * kT);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    for (int k = 0; k < kT; ++k) {
      const int64_t t = b * kT + k;
      double* dst = &xt[static_cast<size_t>(b) * C * kT + k];
      for (int j = 0; j < C; ++j) dst[size_t(j) * kT] = t < n ? static_cast<double>(X[t * C + j]) : 0.0;
    }
  const auto chains = runtime::cpu::have_avx2() ? chains_avx2 : chains_portable;
  std::vector<double> per_row(static_cast<size_t>(R), 0.0);
  const int tasks = (R + kRows - 1) / kRows;
#pragma omp parallel
  {
    std::vector<double> D(size_t(kRows) * C);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int r0 = task * kRows, nr = std::min(kRows, R - r0);
      for (int i = 0; i < nr; ++i) {
        const size_t off = size_t(r0 + i) * C;
        for (int j = 0; j < C; ++j)
          D[size_t(i) * C + j] = static_cast<double>(W_hat[off + j]) - static_cast<double>(W[off + j]);
      }
      double acc[kRows] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const double* x = &xt[static_cast<size_t>(b) * C * kT];
        const int m = static_cast<int>(std::min<int64_t>(kT, n - b * kT));
        for (int i = 0; i < nr; i += 2) {
          const int i2 = std::min(i + 1, nr - 1);  // an odd last row runs twice, added once
          double ya[kT], yb[kT];
          chains(&D[size_t(i) * C], &D[size_t(i2) * C], x, C, ya, yb);
          for (int k = 0; k < m; ++k) acc[i] += ya[k] * ya[k];
          if (i2 != i)
            for (int k = 0; k < m; ++k) acc[i2] += yb[k] * yb[k];
        }
      }
      for (int i = 0; i < nr; ++i) per_row[static_cast<size_t>(r0 + i)] = acc[i];
    }
  }
  double total = 0.0;
  for (int r = 0; r < R; ++r) total += per_row[static_cast<size_t>(r)];
  return total / (static_cast<double>(n) * R);
}

}  // namespace gridq::quant

#include "quant/hessian_factor.h"

#include <cmath>

namespace gridq::quant {

bool cholesky_lower_inplace(double* A, int n) {
  for (int j = 0; j < n; ++j) {
    double* aj = A + int64_t(j) * n;
    double d = aj[j];
    for (int k = 0; k < j; ++k) d -= aj[k] * aj[k];
    if (!(d > 0.0) || !std::isfinite(d)) return false;
    const double ljj = std::sqrt(d);
    aj[j] = ljj;
    // Threads only pay off on long columns; short ones would spend more on the fork/join than on the work.
#pragma omp parallel for schedule(static) if (n - j > 512)
    for (int i = j + 1; i < n; ++i) {
      double* ai = A + int64_t(i) * n;
      double s = ai[j];
      for (int k = 0; k < j; ++k) s -= ai[k] * aj[k];
      ai[j] = s / ljj;
    }
  }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) A[int64_t(i) * n + j] = 0.0;
  return true;
}

namespace {

// From the lower factor L of H: Hinv = L⁻ᵀ·L⁻¹, then U = chol(Hinv)ᵀ. Returns false if the second
// factorization fails.
bool upper_factor_of_inverse(std::vector<double>& L, int n, std::vector<double>& U) {
  // Linv (lower), column by column: solve L·x = e_j.
  std::vector<double> Li(size_t(n) * n, 0.0);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < n; ++j) {
    Li[int64_t(j) * n + j] = 1.0 / L[int64_t(j) * n + j];
    for (int i = j + 1; i < n; ++i) {
      double s = 0.0;
      for (int k = j; k < i; ++k) s += L[int64_t(i) * n + k] * Li[int64_t(k) * n + j];
      Li[int64_t(i) * n + j] = -s / L[int64_t(i) * n + i];
    }
  }
  // Hinv[i][j] = Σ_{k >= max(i,j)} Li[k][i]·Li[k][j]; lower triangle only (j <= i).
  std::vector<double>& Hi = L;  // reuse the storage
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      double s = 0.0;
      for (int k = i; k < n; ++k) s += Li[int64_t(k) * n + i] * Li[int64_t(k) * n + j];
      Hi[int64_t(i) * n + j] = s;
    }
  if (!cholesky_lower_inplace(Hi.data(), n)) return false;
  U.assign(size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) U[int64_t(j) * n + i] = Hi[int64_t(i) * n + j];
  return true;
}

}  // namespace

Expected<InverseFactor> inverse_cholesky_upper(const float* H, int C, int64_t n_tokens, double damp,
                                               int max_retries, const char* what) {
  InverseFactor f;
  double mean_diag = 0.0;
  for (int i = 0; i < C; ++i) {
    for (int j = 0; j <= i; ++j)
      if (!std::isfinite(H[int64_t(i) * C + j]))
        return err("{}: entry ({}, {}) is not finite; a Hessian must be finite", what, i, j);
    mean_diag += H[int64_t(i) * C + i];
  }
  mean_diag /= C;
  if (n_tokens == 0 || mean_diag == 0.0) {
    f.identity = true;
    f.U.assign(size_t(C) * C, 0.0);
    for (int i = 0; i < C; ++i) f.U[int64_t(i) * C + i] = 1.0;
    return f;
  }
  if (!(mean_diag > 0.0))
    return err("{}: mean of diag(H) is {} < 0; H must be positive semi-definite", what, mean_diag);
  double d = damp;
  for (int attempt = 0; attempt <= max_retries; ++attempt, d *= 10.0) {
    std::vector<double> L(size_t(C) * C);
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) L[int64_t(i) * C + j] = H[int64_t(i) * C + j];
    for (int i = 0; i < C; ++i) L[int64_t(i) * C + i] += d * mean_diag;
    if (!cholesky_lower_inplace(L.data(), C)) continue;
    if (!upper_factor_of_inverse(L, C, f.U)) continue;
    f.damp_used = d;
    return f;
  }
  return err(
      "{}: damped Cholesky failed with damping {} and {} retries (x10 each); H is not positive definite",
      what, damp, max_retries);
}

}  // namespace gridq::quant

#include "quant/output_proxy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/device.h"

namespace gridq::quant {
namespace {

bool all_finite(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

}  // namespace

Status check_half_trace_inputs(const float* W, const float* W_hat, int R, int C, const float* H,
                               const char* what) {
  if (R <= 0 || C <= 0) return err("{}: empty shape [{}, {}]", what, R, C);
  const int64_t n = int64_t(R) * C;
  if (!all_finite(W, n) || !all_finite(W_hat, n)) return err("{}: W or W_hat has a non-finite value", what);
  if (!all_finite(H, int64_t(C) * C)) return err("{}: H has a non-finite value", what);
  return {};
}

Expected<double> output_half_trace_on(bool device, const float* W, const float* W_hat, int R, int C,
                                      const float* H, const char* what) {
  if (!device) return output_half_trace(W, W_hat, R, C, H, what);
  const runtime::CudaBackendHooks* hooks = runtime::cuda_backend_hooks();
  if (!hooks || !hooks->half_trace)
    return err("{}: --device cuda: this gridq was built without the CUDA backend", what);
  GRIDQ_RETURN_IF_ERROR(check_half_trace_inputs(W, W_hat, R, C, H, what));
  return hooks->half_trace(W, W_hat, R, C, H);
}

Expected<double> output_half_trace(const float* W, const float* W_hat, int R, int C, const float* H,
                                   const char* what) {
  GRIDQ_RETURN_IF_ERROR(check_half_trace_inputs(W, W_hat, R, C, H, what));
  std::vector<double> row(static_cast<size_t>(R));
#pragma omp parallel
  {
    std::vector<double> d(static_cast<size_t>(C)), v(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      const size_t off = size_t(r) * C;
      for (int j = 0; j < C; ++j) d[j] = double(W_hat[off + j]) - double(W[off + j]);
      // v = Δ_r H: rows of H in order, so each v_j is summed over i in ascending order.
      std::fill(v.begin(), v.end(), 0.0);
      for (int i = 0; i < C; ++i) {
        const double di = d[i];
        if (di == 0.0) continue;  // adds exactly 0 (H is finite)
        const float* h = H + size_t(i) * C;
        for (int j = 0; j < C; ++j) v[j] += di * double(h[j]);
      }
      double s = 0.0;
      for (int j = 0; j < C; ++j) s += d[j] * v[j];
      row[size_t(r)] = 0.5 * s;
    }
  }
  double total = 0.0;
  for (double x : row) total += x;
  return total;
}

Expected<double> output_proxy(const float* W, const float* W_hat, int R, int C, const float* H, int64_t T,
                              const char* what) {
  if (T <= 0) return err("{}: T (total calibration tokens) is {}; it must be > 0", what, T);
  GRIDQ_ASSIGN_OR_RETURN(double h, output_half_trace(W, W_hat, R, C, H, what));
  return h / static_cast<double>(T);
}

}  // namespace gridq::quant

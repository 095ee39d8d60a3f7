// The output proxy tr(ΔW H ΔWᵀ)/2 of quant/output_proxy.cpp on the device (gptq_kernels.h): the same float64
// products and sums in the same order (-fmad=false), so the same bits. V = ΔW·H: a thread per column j for
// kRows rows at once (each H element read once per kRows rows; the d values are broadcasts; 16 rows: a
// [1024, 3072] expert reads its 36 MB H 64 times, not 256, and each thread has 16 chains in flight), then a
// thread per row for its ascending-j dot product, then one thread for the ascending-r total.
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda::gptq {
namespace {

constexpr int kThreads = 256;
constexpr int kRows = 16;

// ΔW = W_hat − W from the fp32 pair, or as −e from a float64 e = W − W_hat (refine_decode's): the same
// doubles either way (IEEE subtraction is sign-symmetric).
struct PairDelta {
  const float *W, *W_hat;
  __device__ double operator()(long long o) const {
    return static_cast<double>(W_hat[o]) - static_cast<double>(W[o]);
  }
};
struct NegErrDelta {
  const double* e;
  __device__ double operator()(long long o) const { return -e[o]; }
};

template <class Delta>
__global__ void __launch_bounds__(kThreads)
    proxy_rows_kernel(Delta delta, const float* H, int R, int C, double* V) {
  const int j = blockIdx.x * kThreads + threadIdx.x, r0 = blockIdx.y * kRows;
  if (j >= C) return;
  double v[kRows] = {};
  for (int i = 0; i < C; ++i) {
    const double h = static_cast<double>(H[static_cast<long long>(i) * C + j]);
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      if (r0 + k >= R) break;
      const double di = delta(static_cast<long long>(r0 + k) * C + i);
      if (di != 0.0) v[k] += di * h;  // the CPU skips these terms (they add exactly 0)
    }
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k)
    if (r0 + k < R) V[static_cast<long long>(r0 + k) * C + j] = v[k];
}

template <class Delta>
__global__ void proxy_dot_kernel(Delta delta, const double* V, int R, int C, double* half) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= R) return;
  const long long off = static_cast<long long>(r) * C;
  double s = 0.0;
  for (int j = 0; j < C; ++j) s += delta(off + j) * V[off + j];
  half[r] = 0.5 * s;
}

__global__ void proxy_total_kernel(const double* half, int R, double* total) {
  double t = 0.0;
  for (int r = 0; r < R; ++r) t += half[r];
  *total = t;
}

template <class Delta>
cudaError_t half_trace(Delta delta, const float* H, int R, int C, double* V, double* half, double* total,
                       cudaStream_t s) {
  if (R <= 0 || C <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads),
                  static_cast<unsigned>((R + kRows - 1) / kRows));
  proxy_rows_kernel<<<grid, kThreads, 0, s>>>(delta, H, R, C, V);
  proxy_dot_kernel<<<(R + 127) / 128, 128, 0, s>>>(delta, V, R, C, half);
  proxy_total_kernel<<<1, 1, 0, s>>>(half, R, total);
  return cudaGetLastError();
}

}  // namespace

cudaError_t raw_output_half_trace(const float* W, const float* W_hat, const float* H, int R, int C, double* V,
                                  double* half, double* total, cudaStream_t s) {
  return half_trace(PairDelta{W, W_hat}, H, R, C, V, half, total, s);
}

cudaError_t raw_output_half_trace_err(const double* e, const float* H, int R, int C, double* V, double* half,
                                      double* total, cudaStream_t s) {
  return half_trace(NegErrDelta{e}, H, R, C, V, half, total, s);
}

}  // namespace gridq::cuda::gptq

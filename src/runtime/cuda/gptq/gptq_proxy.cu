// The output proxy tr(ΔW H ΔWᵀ)/2 of quant/output_proxy.cpp on the device (gptq_kernels.h): the same float64
// products and sums in the same order (-fmad=false), so the same bits. V = ΔW·H: a thread per column j for
// kRows rows at once (each H element read once per kRows rows; the d values are shared-memory broadcasts; 16
// rows: a [1024, 3072] expert reads its 36 MB H 64 times, not 256, and each thread has 16 chains in flight),
// then a thread per row for its ascending-j dot product, then one thread for the ascending-r total.
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

// The block's kRows rows of d for kTile values of i at a time, computed once per block into shared memory
// (each element's two loads and widenings were repeated by every thread of every block along j), stored
// [i][row] with a stride of kRows + 2 doubles: 16-byte aligned for the double2 broadcasts, and the
// half-warp's stores (consecutive i, one row) fall in distinct bank pairs but for one 2-way overlap.
constexpr int kTile = 32, kStride = kRows + 2;

template <class Delta>
__global__ void __launch_bounds__(kThreads)
    proxy_rows_kernel(Delta delta, const float* H, int R, int C, double* V) {
  __shared__ __align__(16) double sd[kTile * kStride];
  const int j = blockIdx.x * kThreads + threadIdx.x, r0 = blockIdx.y * kRows;
  double v[kRows] = {};
  for (int i0 = 0; i0 < C; i0 += kTile) {
    __syncthreads();  // the previous tile's reads are done
    for (int t = threadIdx.x; t < kTile * kRows; t += kThreads) {
      const int ii = t % kTile, k = t / kTile, i = i0 + ii, r = r0 + k;
      sd[ii * kStride + k] = i < C && r < R ? delta(static_cast<long long>(r) * C + i) : 0.0;
    }
    __syncthreads();
    if (j >= C) continue;
    const int n = min(kTile, C - i0);
    for (int ii = 0; ii < n; ++ii) {
      const double h = static_cast<double>(H[static_cast<long long>(i0 + ii) * C + j]);
      const double2* d = reinterpret_cast<const double2*>(sd + ii * kStride);
      if (isfinite(h)) {
        // A zero d adds ±0 to v, which leaves v as it is: v starts at +0 and a sum of finite terms is never
        // −0 under round-to-nearest, so skipping the term (as the CPU does) and adding it give the same bits.
#pragma unroll
        for (int k = 0; k < kRows / 2; ++k) {
          const double2 dk = d[k];
          v[2 * k] += dk.x * h;
          v[2 * k + 1] += dk.y * h;
        }
      } else {  // 0 · inf is NaN: here the skip matters
#pragma unroll
        for (int k = 0; k < kRows / 2; ++k) {
          const double2 dk = d[k];
          if (dk.x != 0.0) v[2 * k] += dk.x * h;
          if (dk.y != 0.0) v[2 * k + 1] += dk.y * h;
        }
      }
    }
  }
  if (j >= C) return;
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

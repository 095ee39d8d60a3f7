// The holdout output-MSE of quant/cb_gptq.cpp holdout_output_mse on the device (gptq_kernels.h): per row r of
// a matrix, Σ_t (Σ_j D[r, j]·x[t, j])² with j and t ascending, in float64 with the CPU's operations
// (-fmad=false). D = Ŵ − W arrives as e = W − Ŵ (refine_decode's): y changes sign, y² does not.
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda::gptq {
namespace {

constexpr int kTile = 16;   // rows r and holdout rows t per block (one thread each pair)
constexpr int kChunk = 32;  // columns j staged per shared-memory pass

// Y2[m, r, t] = (Σ_j e[m, r, j]·x[t, j])², j ascending from +0; X is matrix m's input's holdout rows.
__global__ void __launch_bounds__(kTile* kTile)
    holdout_y2_kernel(const double* __restrict__ e, int R, int C, const int* __restrict__ h_of,
                      const float* __restrict__ X, const long long* __restrict__ x_row0,
                      const int* __restrict__ n_hold, int t_max, double* __restrict__ Y2) {
  __shared__ double es[kTile][kChunk + 1];
  __shared__ float xs[kTile][kChunk + 1];
  const int m = blockIdx.z, h = h_of[m], n = n_hold[h];
  const int t0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  if (t0 >= n) return;  // the whole block: no barrier is skipped by part of it
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;  // t = t0 + tx, r = r0 + ty
  const double* E = e + static_cast<long long>(m) * R * C;
  const float* Xh = X + x_row0[h] * C;
  double y = 0.0;
  for (int j0 = 0; j0 < C; j0 += kChunk) {
    for (int i = threadIdx.x; i < kTile * kChunk; i += kTile * kTile) {
      const int row = i / kChunk, col = i % kChunk;
      const int j = j0 + col;
      es[row][col] = (r0 + row < R && j < C) ? E[static_cast<long long>(r0 + row) * C + j] : 0.0;
      xs[row][col] = (t0 + row < n && j < C) ? Xh[static_cast<long long>(t0 + row) * C + j] : 0.0f;
    }
    __syncthreads();
    const int jn = min(kChunk, C - j0);
    for (int k = 0; k < jn; ++k) y += es[ty][k] * static_cast<double>(xs[tx][k]);
    __syncthreads();
  }
  if (r0 + ty < R && t0 + tx < n) Y2[(static_cast<long long>(m) * R + r0 + ty) * t_max + t0 + tx] = y * y;
}

// acc[m, r] = Σ_t Y2[m, r, t], t ascending from +0.
__global__ void holdout_rows_kernel(const double* __restrict__ Y2, int M, int R, const int* __restrict__ h_of,
                                    const int* __restrict__ n_hold, int t_max, double* __restrict__ acc) {
  const long long x = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= static_cast<long long>(M) * R) return;
  const int n = n_hold[h_of[x / R]];
  const double* y = Y2 + x * t_max;
  double a = 0.0;
  for (int t = 0; t < n; ++t) a += y[t];
  acc[x] = a;
}

}  // namespace

cudaError_t raw_holdout_rows(const double* e, int M, int R, int C, const int* h_of, const float* X,
                             const long long* x_row0, const int* n_hold, int t_max, double* Y2, double* acc,
                             cudaStream_t s) {
  if (M <= 0 || R <= 0 || C <= 0 || t_max <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((t_max + kTile - 1) / kTile),
                  static_cast<unsigned>((R + kTile - 1) / kTile), static_cast<unsigned>(M));
  holdout_y2_kernel<<<grid, kTile * kTile, 0, s>>>(e, R, C, h_of, X, x_row0, n_hold, t_max, Y2);
  const long long rows = static_cast<long long>(M) * R;
  holdout_rows_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, s>>>(Y2, M, R, h_of, n_hold, t_max,
                                                                                acc);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::gptq

// The damped inverse-Cholesky factor of quant/hessian_factor.cpp on the device, batched over Hessians:
// L = chol(H + λI), Li = L⁻¹, Hinv = Liᵀ·Li, U = chol(Hinv)ᵀ. Each element is computed by the CPU's
// sequence of roundings: the CPU's left-looking loops are blocked here (panels of 32 columns or rows, then a
// tiled update of the rest), and every element still subtracts or adds its terms one at a time in the CPU's
// k order — a blocked update applies the terms of panel p before those of panel p + 1, and no partial sums
// are formed. Terms the CPU skips (k outside its range) are exact zeros here (the other triangle), and
// adding ±0 to an accumulator that started at +0 changes no bits. Compiled with -fmad=false.
#include <cmath>

#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda::gptq {
namespace {

constexpr int P = kPanel;
constexpr int kT = 64;          // update tile (rows and columns)
constexpr int kTThreads = 256;  // 16 × 16 threads, 4 × 4 elements each

__device__ inline double* mat(double* A, int h, int C) { return A + static_cast<long long>(h) * C * C; }
__device__ inline const double* mat(const double* A, int h, int C) {
  return A + static_cast<long long>(h) * C * C;
}

// One thread per Hessian sums the diagonal in order (quant's mean_diag); factor_copy then copies the lower
// triangle, checks it is finite and adds the damping to the diagonal.
__global__ void factor_scan(const float* __restrict__ H, int C, const long long* __restrict__ n_tokens,
                            double* __restrict__ mean, uint8_t* __restrict__ identity,
                            uint8_t* __restrict__ bad) {
  const int h = blockIdx.x;
  if (threadIdx.x != 0) return;
  const float* Hh = H + static_cast<long long>(h) * C * C;
  double md = 0.0;
  for (int i = 0; i < C; ++i) md += Hh[static_cast<long long>(i) * C + i];
  md /= C;
  mean[h] = md;
  identity[h] = (n_tokens[h] == 0 || md == 0.0) ? 1 : 0;
  bad[h] = (!identity[h] && !(md > 0.0)) ? 2 : 0;
}

__global__ void factor_copy(const float* __restrict__ H, int C, const double* __restrict__ mean,
                            const double* __restrict__ damp, double* __restrict__ L,
                            uint8_t* __restrict__ bad) {
  const int h = blockIdx.z, i = blockIdx.y;
  const float* row = H + (static_cast<long long>(h) * C + i) * C;
  double* out = L + (static_cast<long long>(h) * C + i) * C;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x) {
    if (j > i) {
      out[j] = 0.0;
      continue;
    }
    const float v = row[j];
    if (!isfinite(v)) bad[h] = 1;
    out[j] = j == i ? static_cast<double>(v) + damp[h] * mean[h] : static_cast<double>(v);
  }
}

// The diagonal block [p, p + 32)² of every active matrix into blk [nH, 32, 32], before chol_panel factors it.
__global__ void chol_block_copy(const double* __restrict__ A, int C, int p,
                                const uint8_t* __restrict__ active, double* __restrict__ blk) {
  const int h = blockIdx.x;
  if (!active[h]) return;
  const double* M = mat(A, h, C);
  for (int e = threadIdx.x; e < P * P; e += blockDim.x)
    blk[static_cast<long long>(h) * P * P + e] = M[static_cast<long long>(p + e / P) * C + p + e % P];
}

// Panel [p, p + 32) of the left-looking Cholesky, the k < p terms already subtracted. Every CTA factors the
// 32×32 diagonal block (redundantly: the same bits) and then its 128 rows below it; CTA 0 writes the block.
// The CTAs read the block from chol_block_copy's copy: a CTA that starts after CTA 0 has written the
// factored block into A (launches of more CTAs than the GPU holds at once) would factor it twice.
__global__ void __launch_bounds__(128)
    chol_panel(double* __restrict__ A, int C, int p, const uint8_t* __restrict__ active,
               const double* __restrict__ blk, uint8_t* __restrict__ fail) {
  const int h = blockIdx.x;
  if (!active[h]) return;
  double* M = mat(A, h, C);
  __shared__ double D[P][P + 1];
  const int tid = threadIdx.x;
  for (int e = tid; e < P * P; e += blockDim.x) D[e / P][e % P] = blk[static_cast<long long>(h) * P * P + e];
  __syncthreads();
  if (tid < 32) {
    const int i = tid;
    for (int j = 0; j < P; ++j) {
      if (i == j) {
        double d = D[j][j];
        for (int k = 0; k < j; ++k) d -= D[j][k] * D[j][k];
        if (!(d > 0.0) || !isfinite(d)) fail[h] = 1;
        D[j][j] = sqrt(d);
      }
      __syncwarp();
      if (i > j) {
        double s = D[i][j];
        for (int k = 0; k < j; ++k) s -= D[i][k] * D[j][k];
        D[i][j] = s / D[j][j];
      }
      __syncwarp();
    }
  }
  __syncthreads();
  if (blockIdx.y == 0)
    for (int e = tid; e < P * P; e += blockDim.x)
      if (e % P <= e / P) M[static_cast<long long>(p + e / P) * C + p + e % P] = D[e / P][e % P];
  const int i = p + P + blockIdx.y * blockDim.x + tid;
  if (i >= C) return;
  double* row = M + static_cast<long long>(i) * C + p;
  double a[P];
#pragma unroll
  for (int j = 0; j < P; ++j) a[j] = row[j];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    double s = a[j];
#pragma unroll
    for (int k = 0; k < j; ++k) s -= a[k] * D[j][k];
    a[j] = s / D[j][j];
  }
#pragma unroll
  for (int j = 0; j < P; ++j) row[j] = a[j];
}

// A[i][j] −= A[i][k]·A[j][k] for k in [p, p + 32), one term at a time, for p + 32 <= j <= i < C.
__global__ void __launch_bounds__(kTThreads)
    chol_update(double* __restrict__ A, int C, int p, const uint8_t* __restrict__ active) {
  const int h = blockIdx.z;
  const int ti = blockIdx.y, tj = blockIdx.x;
  if (!active[h] || tj > ti) return;
  double* M = mat(A, h, C);
  const int base = p + P;
  const int i0 = base + ti * kT, j0 = base + tj * kT;
  __shared__ double Ai[P][kT + 1], Aj[P][kT + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  for (int e = tid; e < P * kT; e += kTThreads) {
    const int r = e / P, k = e % P;
    Ai[k][r] = i0 + r < C ? M[static_cast<long long>(i0 + r) * C + p + k] : 0.0;
    Aj[k][r] = j0 + r < C ? M[static_cast<long long>(j0 + r) * C + p + k] : 0.0;
  }
  __syncthreads();
  double acc[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int i = i0 + ty * 4 + a, j = j0 + tx * 4 + b;
      acc[a][b] = (i < C && j <= i) ? M[static_cast<long long>(i) * C + j] : 0.0;
    }
  for (int k = 0; k < P; ++k)
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) acc[a][b] -= Ai[k][ty * 4 + a] * Aj[k][tx * 4 + b];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int i = i0 + ty * 4 + a, j = j0 + tx * 4 + b;
      if (i < C && j <= i) M[static_cast<long long>(i) * C + j] = acc[a][b];
    }
}

// Rows [q, q + 32) of Li = L⁻¹, one thread per column j < q + 32 (columns are independent): the CPU's
// s = Σ_{k=j}^{i-1} L[i][k]·Li[k][j] (k < q already accumulated into Li[i][j] by li_update), Li[i][j] =
// −s/L[i][i].
__global__ void li_panel(const double* __restrict__ L, double* __restrict__ Li, int C, int q,
                         const uint8_t* __restrict__ active) {
  const int h = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (!active[h] || j >= q + P) return;
  const double* Lm = mat(L, h, C);
  double* X = mat(Li, h, C);
  for (int i = q; i < q + P; ++i) {
    if (i < j) continue;
    if (i == j) {
      X[static_cast<long long>(j) * C + j] = 1.0 / Lm[static_cast<long long>(j) * C + j];
      continue;
    }
    double s = X[static_cast<long long>(i) * C + j];
    for (int k = j > q ? j : q; k < i; ++k)
      s += Lm[static_cast<long long>(i) * C + k] * X[static_cast<long long>(k) * C + j];
    X[static_cast<long long>(i) * C + j] = -s / Lm[static_cast<long long>(i) * C + i];
  }
}

// Li[i][j] += L[i][k]·Li[k][j] for k in [q, q + 32), i >= q + 32, j < q + 32 (Li[k][j] = 0 for k < j).
__global__ void __launch_bounds__(kTThreads) li_update(const double* __restrict__ L, double* __restrict__ Li,
                                                       int C, int q, const uint8_t* __restrict__ active) {
  const int h = blockIdx.z;
  if (!active[h]) return;
  const double* Lm = mat(L, h, C);
  double* X = mat(Li, h, C);
  const int i0 = q + P + blockIdx.y * kT, j0 = blockIdx.x * kT;
  const int ncol = q + P;
  __shared__ double Ls[P][kT + 1], Xs[P][kT + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  for (int e = tid; e < P * kT; e += kTThreads) {
    const int r = e / P, k = e % P;
    Ls[k][r] = i0 + r < C ? Lm[static_cast<long long>(i0 + r) * C + q + k] : 0.0;
  }
  for (int e = tid; e < P * kT; e += kTThreads) {
    const int k = e / kT, c = e % kT;
    Xs[k][c] = j0 + c < ncol ? X[static_cast<long long>(q + k) * C + j0 + c] : 0.0;
  }
  __syncthreads();
  double acc[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int i = i0 + ty * 4 + a, j = j0 + tx * 4 + b;
      acc[a][b] = (i < C && j < ncol) ? X[static_cast<long long>(i) * C + j] : 0.0;
    }
  for (int k = 0; k < P; ++k)
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) acc[a][b] += Ls[k][ty * 4 + a] * Xs[k][tx * 4 + b];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int i = i0 + ty * 4 + a, j = j0 + tx * 4 + b;
      if (i < C && j < ncol) X[static_cast<long long>(i) * C + j] = acc[a][b];
    }
}

// G[i][j] = Σ_{k >= i} Li[k][i]·Li[k][j] for j <= i, from +0 with k ascending; the loop starts at the
// tile's first row (Li[k][i] = 0 for k < i, exact zeros). Written into G's lower triangle.
__global__ void __launch_bounds__(kTThreads) gram_lower(const double* __restrict__ Li, double* __restrict__ G,
                                                        int C, const uint8_t* __restrict__ active) {
  const int h = blockIdx.z;
  const int ti = blockIdx.y, tj = blockIdx.x;
  if (!active[h] || tj > ti) return;
  const double* X = mat(Li, h, C);
  double* out = mat(G, h, C);
  const int i0 = ti * kT, j0 = tj * kT;
  __shared__ double Xi[P][kT + 1], Xj[P][kT + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  double acc[4][4] = {};
  for (int k0 = i0; k0 < C; k0 += P) {
    __syncthreads();
    for (int e = tid; e < P * kT; e += kTThreads) {
      const int k = e / kT, c = e % kT;
      const bool in = k0 + k < C;
      Xi[k][c] = in && i0 + c < C ? X[static_cast<long long>(k0 + k) * C + i0 + c] : 0.0;
      Xj[k][c] = in && j0 + c < C ? X[static_cast<long long>(k0 + k) * C + j0 + c] : 0.0;
    }
    __syncthreads();
    const int kn = C - k0 < P ? C - k0 : P;
    for (int k = 0; k < kn; ++k)
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) acc[a][b] += Xi[k][ty * 4 + a] * Xj[k][tx * 4 + b];
  }
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int i = i0 + ty * 4 + a, j = j0 + tx * 4 + b;
      if (i < C && j <= i) out[static_cast<long long>(i) * C + j] = acc[a][b];
    }
}

__global__ void upper_from_lower(const double* __restrict__ A, double* __restrict__ U, int C,
                                 const uint8_t* __restrict__ active) {
  const int h = blockIdx.z, i = blockIdx.y;
  if (!active[h]) return;
  const double* Am = mat(A, h, C);
  double* Um = mat(U, h, C);
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < C; j += gridDim.x * blockDim.x)
    Um[static_cast<long long>(i) * C + j] = j >= i ? Am[static_cast<long long>(j) * C + i] : 0.0;
}

__global__ void widen(const float* __restrict__ x, long long n, double* __restrict__ y) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    y[i] = x[i];
}

// H's lower triangle from its upper one (the device accumulator's layout, cuda/hessian.h) and the imatrix
// q = diag(H) / n (fp32; 0 for a cold input).
__global__ void mirror_imatrix(float* __restrict__ H, int C, const long long* __restrict__ n,
                               float* __restrict__ q) {
  const int h = blockIdx.z, i = blockIdx.y;
  float* Hh = H + static_cast<long long>(h) * C * C;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < i; j += gridDim.x * blockDim.x)
    Hh[static_cast<long long>(i) * C + j] = Hh[static_cast<long long>(j) * C + i];
  if (blockIdx.x == 0 && threadIdx.x == 0)
    q[static_cast<long long>(h) * C + i] =
        n[h] > 0 ? Hh[static_cast<long long>(i) * C + i] / static_cast<float>(n[h]) : 0.0f;
}

unsigned tiles(int n) { return static_cast<unsigned>((n + kT - 1) / kT); }

}  // namespace

cudaError_t raw_factor_init(const float* H, int nH, int C, const long long* n_tokens, const double* damp,
                            double* L, double* mean, uint8_t* identity, uint8_t* bad, cudaStream_t s) {
  factor_scan<<<nH, 32, 0, s>>>(H, C, n_tokens, mean, identity, bad);
  factor_copy<<<dim3(static_cast<unsigned>((C + 255) / 256), C, nH), 256, 0, s>>>(H, C, mean, damp, L, bad);
  return cudaGetLastError();
}

cudaError_t raw_cholesky(double* A, int nH, int C, const uint8_t* active, uint8_t* fail, cudaStream_t s) {
  double* blk = nullptr;  // [nH, 32, 32] the panel's diagonal blocks as they were before the panel
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&blk), static_cast<size_t>(nH) * P * P * 8, s);
  if (e != cudaSuccess) return e;
  for (int p = 0; p < C; p += P) {
    const int below = C - p - P;
    chol_block_copy<<<nH, 256, 0, s>>>(A, C, p, active, blk);
    chol_panel<<<dim3(nH, static_cast<unsigned>(below > 0 ? (below + 127) / 128 : 1)), 128, 0, s>>>(
        A, C, p, active, blk, fail);
    if (below > 0) chol_update<<<dim3(tiles(below), tiles(below), nH), kTThreads, 0, s>>>(A, C, p, active);
  }
  e = cudaGetLastError();
  const cudaError_t f = cudaFreeAsync(blk, s);
  return e != cudaSuccess ? e : f;
}

cudaError_t raw_inverse_gram(double* L, double* Li, int nH, int C, const uint8_t* active, cudaStream_t s) {
  for (int q = 0; q < C; q += P) {
    li_panel<<<dim3(static_cast<unsigned>((q + P + 127) / 128), nH), 128, 0, s>>>(L, Li, C, q, active);
    const int below = C - q - P;
    if (below > 0) li_update<<<dim3(tiles(q + P), tiles(below), nH), kTThreads, 0, s>>>(L, Li, C, q, active);
  }
  gram_lower<<<dim3(tiles(C), tiles(C), nH), kTThreads, 0, s>>>(Li, L, C, active);
  return cudaGetLastError();
}

cudaError_t raw_upper_from_lower(const double* A, double* U, int nH, int C, const uint8_t* active,
                                 cudaStream_t s) {
  upper_from_lower<<<dim3(static_cast<unsigned>((C + 255) / 256), C, nH), 256, 0, s>>>(A, U, C, active);
  return cudaGetLastError();
}

cudaError_t raw_mirror_imatrix(float* H, int nH, int C, const long long* n, float* q, cudaStream_t s) {
  mirror_imatrix<<<dim3(static_cast<unsigned>((C + 255) / 256), C, nH), 256, 0, s>>>(H, C, n, q);
  return cudaGetLastError();
}

cudaError_t raw_widen(const float* x, long long n, double* y, cudaStream_t s) {
  widen<<<1024, 256, 0, s>>>(x, n, y);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::gptq

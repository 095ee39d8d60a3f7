// The device H = Σ xᵀx (hessian.h). Bound: FP32 FMA throughput. One CTA owns a 64×64 tile of the upper
// triangle and walks every staged row: per 256-row block a fresh register accumulator (one fmaf chain per
// element, rows in order, from +0), added to the tile's running H at the block's end — the CPU
// accumulator's exact sequence of roundings, so the bits agree whatever the launch shape.
#include <algorithm>

#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {
namespace {

constexpr long long kBlock = kHessianBlockRows;
constexpr int kTile = 64;      // H rows and columns per CTA
constexpr int kSlab = 32;      // rows staged in shared memory at a time (divides kBlockRows)
constexpr int kThreads = 256;  // 16 × 16 threads, 4 × 4 outputs each

static_assert(kBlock % kSlab == 0, "a block is whole slabs");

// X [rows, C] fp32, H [C, C] fp32 (upper-triangle tiles read and written; others untouched).
__global__ void __launch_bounds__(kThreads)
    hessian_tiles(const float* __restrict__ X, int64_t rows, int C, float* __restrict__ H) {
  const int ti = blockIdx.y, tj = blockIdx.x;
  if (ti > tj) return;  // the lower triangle is mirrored at the end
  __shared__ __align__(16) float As[kSlab][kTile];
  __shared__ __align__(16) float Bs[kSlab][kTile];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int i0 = ti * kTile + ty * 4, j0 = tj * kTile + tx * 4;
  float h[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      h[a][b] = (i0 + a < C && j0 + b < C) ? H[static_cast<int64_t>(i0 + a) * C + j0 + b] : 0.0f;

  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int len = static_cast<int>(rows - r0 < kBlock ? rows - r0 : kBlock);
    float acc[4][4];
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
    for (int s0 = 0; s0 < len; s0 += kSlab) {
      const int sl = min(kSlab, len - s0);
      __syncthreads();  // the previous slab's readers are done
      for (int e = tid; e < kSlab * kTile; e += kThreads) {
        const int t = e / kTile, c = e % kTile;
        const int64_t r = r0 + s0 + t;
        const int ci = ti * kTile + c, cj = tj * kTile + c;
        As[t][c] = (t < sl && ci < C) ? X[r * C + ci] : 0.0f;
        Bs[t][c] = (t < sl && cj < C) ? X[r * C + cj] : 0.0f;
      }
      __syncthreads();
      for (int t = 0; t < sl; ++t) {  // row order: the CPU's fma chain
        const float4 av = *reinterpret_cast<const float4*>(&As[t][ty * 4]);
        const float4 bv = *reinterpret_cast<const float4*>(&Bs[t][tx * 4]);
        const float a4[4] = {av.x, av.y, av.z, av.w}, b4[4] = {bv.x, bv.y, bv.z, bv.w};
        for (int a = 0; a < 4; ++a)
          for (int b = 0; b < 4; ++b) acc[a][b] = __fmaf_rn(a4[a], b4[b], acc[a][b]);
      }
    }
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) h[a][b] = __fadd_rn(h[a][b], acc[a][b]);
  }
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (i0 + a < C && j0 + b < C) H[static_cast<int64_t>(i0 + a) * C + j0 + b] = h[a][b];
}

// dst[r][c] = x[r][c] · scale[r] (fp32 product, rounded once).
__global__ void scale_rows(const float* __restrict__ x, const float* __restrict__ scale, int64_t n, int C,
                           float* __restrict__ dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * C) dst[i] = __fmul_rn(x[i], scale[i / C]);
}

}  // namespace

cudaError_t raw_hessian_tiles(const float* x, long long rows, int cols, float* H, cudaStream_t s) {
  const int nt = (cols + kTile - 1) / kTile;
  hessian_tiles<<<dim3(static_cast<unsigned>(nt), static_cast<unsigned>(nt)), kThreads, 0, s>>>(x, rows, cols,
                                                                                                H);
  return cudaGetLastError();
}

cudaError_t raw_scale_rows(const float* x, const float* scale, long long n, int cols, float* dst,
                           cudaStream_t s) {
  const int64_t e = n * cols;
  scale_rows<<<static_cast<unsigned>((e + 255) / 256), 256, 0, s>>>(x, scale, n, cols, dst);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

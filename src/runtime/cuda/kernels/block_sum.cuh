// The FP64 sum of squares of the CPU reference's rmsnorm_rows, over a block: per-thread strided partials,
// then a fixed tree over the kThreads partials (shared memory `red` [kThreads], the last five levels by warp
// shuffles in the same order). Every thread gets the sum.
#pragma once

namespace gridq::cuda::detail {

template <int kThreads>
__device__ double block_sum_f64(double v, double* red) {
  static_assert(kThreads >= 64 && (kThreads & (kThreads - 1)) == 0, "a power of two, at least two warps");
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s >= 32; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  // The tree's last five levels inside warp 0 by shuffles: lane i adds lane i + s's value exactly where the
  // shared-memory tree added red[i + s] (lanes ≥ s compute values nobody reads), without five barriers.
  if (threadIdx.x < 32) {
    double x = red[threadIdx.x];
    for (int s = 16; s > 0; s >>= 1) x += __shfl_down_sync(0xffffffffu, x, s);
    if (threadIdx.x == 0) red[0] = x;
  }
  __syncthreads();
  const double r = red[0];
  __syncthreads();  // red may be reused right after
  return r;
}

}  // namespace gridq::cuda::detail

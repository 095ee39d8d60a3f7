// The FP64 sum of squares of the CPU reference's rmsnorm_rows, over a block: per-thread strided partials,
// then a fixed tree over the kThreads partials in shared memory `red` [kThreads]. Every thread gets the sum.
#pragma once

namespace gridq::cuda::detail {

template <int kThreads>
__device__ double block_sum_f64(double v, double* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();  // red may be reused right after
  return r;
}

}  // namespace gridq::cuda::detail

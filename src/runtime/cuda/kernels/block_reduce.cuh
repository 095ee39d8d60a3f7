// Block-wide max and or over nw warps (exact in any order), through `red` [nw] of shared memory; every
// thread gets the result. Both end with a barrier, so `red` may be reused right after.
#pragma once

namespace gridq::cuda::detail {

__device__ __forceinline__ float block_max_n(float v, float* red, int nw) {
  for (int m = 16; m; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int i = 1; i < nw; ++i) v = fmaxf(v, red[i]);
  __syncthreads();
  return v;
}

__device__ __forceinline__ int block_or_n(int v, int* red, int nw) {
  v = __any_sync(0xffffffffu, v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0;
  for (int i = 0; i < nw; ++i) v |= red[i];
  __syncthreads();
  return v;
}

}  // namespace gridq::cuda::detail

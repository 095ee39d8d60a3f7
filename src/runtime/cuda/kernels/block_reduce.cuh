// Block-wide max and or over nw warps (exact in any order), through `red` [nw] of shared memory; every
// thread gets the result. Both end with a barrier, so `red` may be reused right after. And the FP8 per-token
// contract of a row whose BF16 values the block holds in registers.
#pragma once

#include "runtime/cuda/device_util.cuh"

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

// Element tid + blockDim·j of a row of n is v[j]; amax / nan: this thread's max |v| and NaN flag. Writes the
// row's E4M3 codes to q and its scale to *s: bit for bit quantize_fp8 of the row (format.md §14.2).
template <int kPer>
__device__ __forceinline__ void fp8_row_from_regs(const float (&v)[kPer], float amax, int nan, int n,
                                                  uint8_t* q, float* s, float* red, int* ired) {
  const int nw = static_cast<int>(blockDim.x / 32);
  amax = block_max_n(amax, red, nw);
  nan = block_or_n(nan, ired, nw);
  const float sc = nan ? __int_as_float(0x7FC00000) : fp8_token_scale(amax);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = static_cast<int>(threadIdx.x + blockDim.x * j);
    if (i >= n) break;
    q[i] = nan ? uint8_t{0x7F} : fp8_quant_elem(v[j], sc);
  }
  if (threadIdx.x == 0) *s = sc;
}

}  // namespace gridq::cuda::detail

// Block-wide reductions of a row's max and NaN flag, and the FP8 per-token contract of a row whose BF16
// values the block holds in registers.
#pragma once

#include "runtime/cuda/device_util.cuh"

namespace gridq::cuda::detail {

// Block-wide max of unsigned v over nw warps (exact in any order), through `red` [nw] of shared memory;
// every thread gets the result, and the barrier it ends with lets `red` be reused right after.
__device__ __forceinline__ unsigned block_max_u32(unsigned v, unsigned* red, int nw) {
  for (int m = 16; m; m >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, m));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int i = 1; i < nw; ++i) v = max(v, red[i]);
  __syncthreads();
  return v;
}

// The block's max of amax (≥ 0) and OR of nan in one reduction (two would cost two more barriers on the
// one-block kernels' critical path): amax orders as its bits, and a NaN anywhere is the largest key.
__device__ __forceinline__ void block_max_nan(float& amax, int& nan, float* red, int nw) {
  const unsigned key =
      block_max_u32(nan ? 0xFFFFFFFFu : __float_as_uint(amax), reinterpret_cast<unsigned*>(red), nw);
  nan = key == 0xFFFFFFFFu;
  amax = __uint_as_float(key);
}

// Element tid + blockDim·j of a row of n is v[j]; amax / nan: this thread's max |v| and NaN flag. Writes the
// row's E4M3 codes to q and its scale to *s: bit for bit quantize_fp8 of the row (format.md §14.2).
template <int kPer>
__device__ __forceinline__ void fp8_row_from_regs(const float (&v)[kPer], float amax, int nan, int n,
                                                  uint8_t* q, float* s, float* red) {
  block_max_nan(amax, nan, red, static_cast<int>(blockDim.x / 32));
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

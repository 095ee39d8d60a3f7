// The router's selection step, shared by both routing kernels (route.cu, kernels/route_tokens.cu): the index
// of the largest key[0..E) over a block of kThreads threads, the lowest index on ties (the CPU reference's
// strict-greater scan). bv / bi: shared scratch of kThreads / 32 entries. The result is valid on thread 0
// only; the caller reads it there and synchronises before the next call.
#pragma once

namespace gridq::cuda::detail {

template <int kThreads>
__device__ int block_argmax(const float* key, int E, float* bv, int* bi) {
  float best = -INFINITY;
  int besti = 0x7fffffff;
  for (int e = threadIdx.x; e < E; e += kThreads)
    if (key[e] > best || (key[e] == best && e < besti)) best = key[e], besti = e;
  for (int o = 16; o; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, besti, o);
    if (ob > best || (ob == best && oi < besti)) best = ob, besti = oi;
  }
  if ((threadIdx.x & 31) == 0) bv[threadIdx.x >> 5] = best, bi[threadIdx.x >> 5] = besti;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w)
      if (bv[w] > bv[0] || (bv[w] == bv[0] && bi[w] < bi[0])) bv[0] = bv[w], bi[0] = bi[w];
  return threadIdx.x == 0 ? bi[0] : -1;
}

}  // namespace gridq::cuda::detail

// The device sampler's block (sample.cu): 1,024 threads a row, the shared memory they share, and the
// block-wide max, integer sum and arg max in fixed orders. Included by sample.cu alone.
#pragma once

#include <climits>

#include "runtime/cuda/kernels/sample_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct Shared {
  double red[kThreads];
  double cw[kSampleCandidates];  // candidates' w, then sorted
  int ci[kSampleCandidates];     // their ids
  double warp_tot[kWarps], base[kWarps + 1];
  int warp_last[kWarps];
  double dv[kWarps];
  int iv[kWarps];
  int n_cand, status, token, id_cut, pick_warp;
  double w_cut;
  double p_target;  // top-p's target mass, for top_p_wide (status 3)
};

__device__ double block_max(double v, Shared& sh) {
  for (int o = 16; o; o >>= 1) v = fmax(v, __shfl_xor_sync(kAll, v, o));
  if ((threadIdx.x & 31) == 0) sh.dv[threadIdx.x >> 5] = v;
  __syncthreads();
  double r = sh.dv[0];
  for (int w = 1; w < kWarps; ++w) r = fmax(r, sh.dv[w]);
  __syncthreads();
  return r;
}

__device__ int block_sum_int(int v, Shared& sh) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  if ((threadIdx.x & 31) == 0) sh.iv[threadIdx.x >> 5] = v;
  __syncthreads();
  int r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.iv[w];
  __syncthreads();
  return r;
}

// Lowest index of the largest s[0..V) (the host's strict-greater scan).
__device__ int block_argmax(const double* s, int V, Shared& sh) {
  double best = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (s[i] > best || (s[i] == best && i < bi)) best = s[i], bi = i;
  for (int o = 16; o; o >>= 1) {
    const double ob = __shfl_xor_sync(kAll, best, o);
    const int oi = __shfl_xor_sync(kAll, bi, o);
    if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
  }
  if ((threadIdx.x & 31) == 0) sh.dv[threadIdx.x >> 5] = best, sh.iv[threadIdx.x >> 5] = bi;
  __syncthreads();
  double b = sh.dv[0];
  int r = sh.iv[0];
  for (int w = 1; w < kWarps; ++w)
    if (sh.dv[w] > b || (sh.dv[w] == b && sh.iv[w] < r)) b = sh.dv[w], r = sh.iv[w];
  __syncthreads();
  return r;
}

}  // namespace
}  // namespace gridq::cuda::detail

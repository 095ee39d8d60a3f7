// MoE routing of the step's rows (laguna.md §1.4 steps 1–5, and Qwen3-MoE's softmax router): the CPU
// reference's arithmetic in the same order (runtime/router.cpp), one block per row, so a row's experts and
// weights never depend on the other rows. Selection takes the largest score + bias, the lowest id on ties;
// the renormalising sum runs in selection order; the result is sorted by expert id for the experts' sum.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/block_argmax.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxE = 1024;
constexpr int kMaxK = 32;

__global__ void __launch_bounds__(kThreads)
    route_tokens_kernel(const float* z, long long ld, const float* bias, int E, int k, int softmax,
                        int renorm, int* ids, float* w) {
  __shared__ float s[kMaxE], sel[kMaxE];
  __shared__ float bv[kThreads / 32];
  __shared__ int bi[kThreads / 32];
  __shared__ int chosen[kMaxK];
  const long long t = blockIdx.x;
  const float* zr = z + t * ld;
  if (!softmax) {
    for (int e = threadIdx.x; e < E; e += kThreads) s[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-zr[e])));
  } else if (threadIdx.x == 0) {  // the reference's sequential max and sum
    float mx = zr[0];
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, zr[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, s[e] = expf(__fsub_rn(zr[e], mx)));
    for (int e = 0; e < E; ++e) s[e] = __fdiv_rn(s[e], sum);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kThreads) sel[e] = bias ? __fadd_rn(s[e], bias[e]) : s[e];
  __syncthreads();
  for (int j = 0; j < k; ++j) {
    const int pick = block_argmax<kThreads>(sel, E, bv, bi);
    if (threadIdx.x == 0) {
      chosen[j] = pick;
      sel[pick] = -INFINITY;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float wt[kMaxK];
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum = __fadd_rn(sum, wt[j] = s[chosen[j]]);
    if (renorm)
      for (int j = 0; j < k; ++j) wt[j] = __fdiv_rn(wt[j], sum);
    // Insertion sort by expert id (k ≤ 32).
    for (int a = 1; a < k; ++a)
      for (int b = a; b > 0 && chosen[b] < chosen[b - 1]; --b) {
        const int ti = chosen[b];
        chosen[b] = chosen[b - 1], chosen[b - 1] = ti;
        const float tw = wt[b];
        wt[b] = wt[b - 1], wt[b - 1] = tw;
      }
    for (int j = 0; j < k; ++j) ids[t * k + j] = chosen[j], w[t * k + j] = wt[j];
  }
}

}  // namespace

cudaError_t raw_route_tokens(const float* z, long long ld, const float* bias, int T, int E, int k,
                             int softmax, int renorm, int* ids, float* w, cudaStream_t s) {
  if (E < 1 || E > kMaxE || k < 1 || k > kMaxK || k > E) return cudaErrorInvalidValue;
  route_tokens_kernel<<<T, kThreads, 0, s>>>(z, ld, bias, E, k, softmax, renorm, ids, w);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

// MoE router epilogue: sigmoid scores, top-k on score + bias (bias only selects), weights renormalised over
// the chosen set, and the union of chosen experts over the M tokens as "slots" for the expert kernels.
// One block; ties pick the lower expert id (deterministic).
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/block_argmax.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxE = 512;
constexpr int kMaxM = 16;
constexpr int kMaxTopk = 16;

__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* logits, const float* bias, int M, int E, int topk, int* nslots,
                 int* slot_expert, float* slot_weight, int* topk_ids, float* topk_w) {
  __shared__ float score[kMaxE];
  __shared__ float key[kMaxE];
  __shared__ int chosen[kMaxM][kMaxTopk];
  __shared__ float cw[kMaxM][kMaxTopk];
  __shared__ float bv[kRouteThreads / 32];
  __shared__ int bi[kRouteThreads / 32];
  __shared__ int used[kMaxE];
  __shared__ int slot_of[kMaxE];
  pdl_launch_dependents();
  pdl_wait();
  for (int e = threadIdx.x; e < E; e += kRouteThreads) used[e] = 0;
  for (int m = 0; m < M; ++m) {
    for (int e = threadIdx.x; e < E; e += kRouteThreads) {
      const float z = logits[static_cast<long long>(m) * E + e];
      const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
      score[e] = s;
      key[e] = __fadd_rn(s, bias[e]);
    }
    __syncthreads();
    for (int j = 0; j < topk; ++j) {
      const int pick = block_argmax<kRouteThreads>(key, E, bv, bi);
      if (threadIdx.x == 0) {
        chosen[m][j] = pick;
        key[pick] = -INFINITY;
        used[pick] = 1;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      float sum = 0.0f;
      for (int j = 0; j < topk; ++j) sum = __fadd_rn(sum, score[chosen[m][j]]);
      for (int j = 0; j < topk; ++j) {
        cw[m][j] = __fdiv_rn(score[chosen[m][j]], sum);
        if (topk_ids) topk_ids[m * topk + j] = chosen[m][j];
        if (topk_w) topk_w[m * topk + j] = cw[m][j];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    int n = 0;
    for (int e = 0; e < E; ++e) {
      slot_of[e] = used[e] ? n : -1;
      if (used[e]) slot_expert[n++] = e;
    }
    *nslots = n;
    for (int i = 0; i < n * M; ++i) slot_weight[i] = 0.0f;
    for (int m = 0; m < M; ++m)
      for (int j = 0; j < topk; ++j) slot_weight[slot_of[chosen[m][j]] * M + m] = cw[m][j];
  }
}

}  // namespace

cudaError_t raw_route(const float* logits, const float* bias, int M, int E, int topk, int* nslots,
                      int* slot_expert, float* slot_weight, int* topk_ids, float* topk_w, cudaStream_t st,
                      bool pdl) {
  if (E > kMaxE || M > kMaxM || topk > kMaxTopk || topk > E) return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(kRouteThreads);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, route_kernel, logits, bias, M, E, topk, nslots, slot_expert,
                                     slot_weight, topk_ids, topk_w);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace gridq::cuda::detail

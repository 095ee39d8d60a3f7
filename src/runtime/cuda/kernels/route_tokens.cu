// MoE routing of the step's rows (laguna.md §1.4 steps 1–5, and Qwen3-MoE's softmax router): the CPU
// reference's arithmetic in the same order (runtime/router.cpp), one warp per row, so a row's experts and
// weights never depend on the other rows. Selection takes the largest score + bias, the lowest id on ties;
// the renormalising sum runs in selection order; the result is sorted by expert id for the experts' sum.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kMaxE = 1024;
constexpr int kMaxK = 32;
constexpr unsigned kAll = 0xffffffffu;

// One warp per row: the k selection rounds are warp shuffles (no block barriers), each lane scanning the
// experts e ≡ lane (mod 32) in shared memory.
__global__ void __launch_bounds__(32)
    route_tokens_kernel(const float* z, long long ld, const float* bias, int E, int k, int softmax,
                        int renorm, int* ids, float* w) {
  pdl_entry();
  __shared__ float s[kMaxE], sel[kMaxE];
  __shared__ int chosen[kMaxK];
  const long long t = blockIdx.x;
  const int lane = threadIdx.x;
  const float* zr = z + t * ld;
  if (!softmax) {
    for (int e = lane; e < E; e += 32) s[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-zr[e])));
  } else if (lane == 0) {  // the reference's sequential max and sum
    float mx = zr[0];
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, zr[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum = __fadd_rn(sum, s[e] = expf(__fsub_rn(zr[e], mx)));
    for (int e = 0; e < E; ++e) s[e] = __fdiv_rn(s[e], sum);
  }
  __syncwarp();
  for (int e = lane; e < E; e += 32) sel[e] = bias ? __fadd_rn(s[e], bias[e]) : s[e];
  __syncwarp();
  for (int j = 0; j < k; ++j) {
    // The largest sel, the lowest id on ties (the reference's strict-greater scan).
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = lane; e < E; e += 32)
      if (sel[e] > best || (sel[e] == best && e < bi)) best = sel[e], bi = e;
    for (int o = 16; o; o >>= 1) {
      const float ob = __shfl_xor_sync(kAll, best, o);
      const int oi = __shfl_xor_sync(kAll, bi, o);
      if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
    }
    if (lane == 0) chosen[j] = bi, sel[bi] = -INFINITY;
    __syncwarp();
  }
  if (lane == 0) {
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
  GQ_KLAUNCH(
      launch(route_tokens_kernel, dim3(T), dim3(32), 0, s, z, ld, bias, E, k, softmax, renorm, ids, w));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

// MoE routing of the step's rows (laguna.md §1.4 steps 1–5, and Qwen3-MoE's softmax router): the CPU
// reference's arithmetic in the same order (runtime/router.cpp), one block per row, so a row's experts and
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

// One block per row, a thread per expert. Selection by rank: expert e is chosen at place r, r = how many
// experts come before it in the reference's order (larger score + bias first, the lower id on ties; NaN as
// −inf), r < k. That is the reference's k rounds of strict-greater scans, without their k dependent warp
// reductions (a single warp doing them serially cost ~15 µs per layer at batch 1).
__global__ void __launch_bounds__(kMaxE)
    route_tokens_kernel(const float* z, long long ld, const float* bias, int E, int k, int softmax,
                        int renorm, int* ids, float* w) {
  pdl_entry();
  __shared__ float s[kMaxE], sel[kMaxE];
  __shared__ float red[kMaxE / 32];
  __shared__ float sum_sh;
  __shared__ int chosen[kMaxK];
  const long long t = blockIdx.x;
  const int e = threadIdx.x, lane = e % 32;
  const bool live = e < E;
  const float* zr = z + t * ld;
  if (!softmax) {
    if (live) s[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-zr[e])));
  } else {  // the reference's max (exact in any order), then its sequential sum
    float mx = live ? zr[e] : -INFINITY;
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, o));
    if (lane == 0) red[e / 32] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) mx = fmaxf(mx, red[i]);
    if (live) s[e] = expf(__fsub_rn(zr[e], mx));
    __syncthreads();
    if (e == 0) {
      float sum = 0.0f;
      for (int i = 0; i < E; ++i) sum = __fadd_rn(sum, s[i]);
      sum_sh = sum;
    }
    __syncthreads();
    if (live) s[e] = __fdiv_rn(s[e], sum_sh);
  }
  if (live) {
    const float v = bias ? __fadd_rn(s[e], bias[e]) : s[e];
    sel[e] = isnan(v) ? -INFINITY : v;
  }
  __syncthreads();
  if (live) {
    const float v = sel[e];
    int r = 0;
    for (int i = 0; i < E; ++i) {
      const float u = sel[i];
      r += (u > v) || (u == v && i < e);
    }
    if (r < k) chosen[r] = e;
  }
  __syncthreads();
  // Weights in selection order (the reference's renormalising sum), then each choice to its place by id (the
  // experts' accumulation order): k threads at once, no serial sort.
  if (e == 0) {
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum = __fadd_rn(sum, s[chosen[j]]);
    sum_sh = sum;
  }
  __syncthreads();
  if (e < k) {
    const int me = chosen[e];
    int place = 0;
    for (int j = 0; j < k; ++j) place += chosen[j] < me;
    ids[t * k + place] = me;
    w[t * k + place] = renorm ? __fdiv_rn(s[me], sum_sh) : s[me];
  }
}

}  // namespace

cudaError_t raw_route_tokens(const float* z, long long ld, const float* bias, int T, int E, int k,
                             int softmax, int renorm, int* ids, float* w, cudaStream_t s) {
  if (E < 1 || E > kMaxE || k < 1 || k > kMaxK || k > E) return cudaErrorInvalidValue;
  const unsigned threads = static_cast<unsigned>((E + 31) / 32 * 32);
  GQ_KLAUNCH(
      launch(route_tokens_kernel, dim3(T), dim3(threads), 0, s, z, ld, bias, E, k, softmax, renorm, ids, w));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

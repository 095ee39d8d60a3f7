// Attention of the step's rows over their sequences' KV (paged full layers, ring sliding layers), prefill and
// decode alike: one warp per (row, head, split of kAttnSplitKeys key positions) with an online softmax in
// FP32, then one warp per (row, head) merges the splits in split order. Splits are cut at fixed positions,
// so a row's result depends only on its own sequence (batch invariance), never on the step's other rows.
// Bound: KV bandwidth at long context, latency otherwise (the speed issue reworks this for full bandwidth).
#include <cfloat>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kPer = kMaxHeadDim / 32;  // dims per lane at most

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void __launch_bounds__(32) attn_split_kernel(const AttnArgs a) {
  const int th = blockIdx.x, split = blockIdx.y, lane = threadIdx.x;
  const int t = th / a.nh, h = th % a.nh, kvh = h / (a.nh / a.nkv), d = a.d, per = d / 32;
  const int pos = a.rows.pos[t], slot = a.rows.seq_slot[t];
  const int j_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int j0 = max(j_lo, split * kAttnSplitKeys), j1 = min(pos + 1, (split + 1) * kAttnSplitKeys);
  float* part = a.partial + (static_cast<long long>(th) * a.max_splits + split) * (d + 2);
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(d)));
  float q[kPer], acc[kPer];
  const float* qh = a.q + static_cast<long long>(th) * d;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    q[i] = i < per ? qh[lane + 32 * i] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int j = j0; j < j1; ++j) {
    const uint16_t* kr = kv_row(a.kv, slot, j, false) + static_cast<long long>(kvh) * d;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (i < per) s = __fadd_rn(s, __fmul_rn(q[i], bf16_bits_to_f32(kr[lane + 32 * i])));
    s = __fmul_rn(warp_sum(s), scale);
    const float mn = fmaxf(m, s);
    const float corr = expf(__fsub_rn(m, mn)), p = expf(__fsub_rn(s, mn));
    l = __fadd_rn(__fmul_rn(l, corr), p);
    const uint16_t* vr = kv_row(a.kv, slot, j, true) + static_cast<long long>(kvh) * d;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (i < per) acc[i] = __fadd_rn(__fmul_rn(acc[i], corr), __fmul_rn(p, bf16_bits_to_f32(vr[lane + 32 * i])));
    m = mn;
  }
  if (lane == 0) part[0] = j0 < j1 ? m : -FLT_MAX, part[1] = l;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (i < per) part[2 + lane + 32 * i] = acc[i];
}

__global__ void __launch_bounds__(32) attn_merge_kernel(const AttnArgs a) {
  const int th = blockIdx.x, lane = threadIdx.x, d = a.d, per = d / 32;
  const int t = th / a.nh, pos = a.rows.pos[t];
  const int n = min(a.max_splits, pos / kAttnSplitKeys + 1);
  const float* base = a.partial + static_cast<long long>(th) * a.max_splits * (d + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < n; ++s) M = fmaxf(M, base[s * (d + 2)]);
  float L = 0.0f, o[kPer] = {};
  for (int s = 0; s < n; ++s) {
    const float* p = base + s * (d + 2);
    if (p[1] == 0.0f) continue;  // an empty split (outside the window)
    const float w = expf(__fsub_rn(p[0], M));
    L = __fadd_rn(L, __fmul_rn(p[1], w));
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (i < per) o[i] = __fadd_rn(o[i], __fmul_rn(p[2 + lane + 32 * i], w));
  }
  float* out = a.o + static_cast<long long>(th) * d;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (i < per) out[lane + 32 * i] = __fdiv_rn(o[i], L);
}

}  // namespace

cudaError_t raw_attention(const AttnArgs& a, cudaStream_t s) {
  if (a.d % 32 || a.d > kMaxHeadDim || a.nkv < 1 || a.nh % a.nkv || a.max_splits < 1) return cudaErrorInvalidValue;
  attn_split_kernel<<<dim3(a.T * a.nh, a.max_splits), 32, 0, s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attn_merge_kernel<<<a.T * a.nh, 32, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

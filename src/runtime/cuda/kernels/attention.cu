// Attention of the step's rows over their sequences' KV (paged full layers, ring sliding layers), prefill and
// decode alike: one warp per (row, head, split of kAttnSplitKeys key positions) with an online softmax in
// FP32 over chunks of 32 keys, then one warp per (row, head) merges the splits in split order. Splits are cut
// at fixed positions, so a row's result depends only on its own sequence (batch invariance), never on the
// step's other rows. Bound: KV bandwidth at long context, latency otherwise (the speed issue reworks this for
// full bandwidth).
#include <cfloat>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kPer = kMaxHeadDim / 32;  // dims per lane at most

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 32 keys at a time: lane l scores key j + l against q (staged in shared memory), the warp takes the chunk's
// max and sum with fixed butterflies, then every lane accumulates its d/32 output dims over the 32 keys in
// key order (each key's V row is one coalesced read).
__global__ void __launch_bounds__(32) attn_split_kernel(const AttnArgs a) {
  pdl_entry();
  __shared__ float qs[kMaxHeadDim];
  const int th = blockIdx.x, split = blockIdx.y, lane = threadIdx.x;
  const int t = th / a.nh, h = th % a.nh, kvh = h / (a.nh / a.nkv), d = a.d, per = d / 32;
  const int pos = a.rows.pos[t], slot = a.rows.seq_slot[t];
  const int j_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int j0 = max(j_lo, split * kAttnSplitKeys), j1 = min(pos + 1, (split + 1) * kAttnSplitKeys);
  float* part = a.partial + (static_cast<long long>(th) * a.max_splits + split) * (d + 2);
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(d)));
  const float* qh = a.q + static_cast<long long>(th) * d;
  for (int i = lane; i < d; i += 32) qs[i] = qh[i];
  __syncwarp();
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int c0 = j0; c0 < j1; c0 += 32) {
    const int j = c0 + lane;
    float s = -FLT_MAX;
    if (j < j1) {
      const uint4* kr =
          reinterpret_cast<const uint4*>(kv_row(a.kv, slot, j, false) + static_cast<long long>(kvh) * d);
      float dot = 0.0f;
      for (int v = 0; v < d / 8; ++v) {
        const uint4 w = kr[v];
        const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dot = fmaf(qs[8 * v + 2 * e], bf16_bits_to_f32(ww[e] & 0xFFFF), dot);
          dot = fmaf(qs[8 * v + 2 * e + 1], bf16_bits_to_f32(ww[e] >> 16), dot);
        }
      }
      s = __fmul_rn(dot, scale);
    }
    float cm = s;
    for (int o = 16; o; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
    const float mn = fmaxf(m, cm);
    const float corr = expf(__fsub_rn(m, mn));
    const float p = j < j1 ? expf(__fsub_rn(s, mn)) : 0.0f;
    l = __fadd_rn(__fmul_rn(l, corr), warp_sum(p));
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = __fmul_rn(acc[i], corr);
    const int n = min(32, j1 - c0);
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const uint16_t* vr = kv_row(a.kv, slot, c0 + jj, true) + static_cast<long long>(kvh) * d + lane * per;
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        if (i < per) acc[i] = fmaf(pj, bf16_bits_to_f32(vr[i]), acc[i]);
    }
    m = mn;
  }
  if (lane == 0) part[0] = j0 < j1 ? m : -FLT_MAX, part[1] = l;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (i < per) part[2 + lane * per + i] = acc[i];
}

__global__ void __launch_bounds__(32) attn_merge_kernel(const AttnArgs a) {
  pdl_entry();
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
      if (i < per) o[i] = __fadd_rn(o[i], __fmul_rn(p[2 + lane * per + i], w));
  }
  float* out = a.o + static_cast<long long>(th) * d;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (i < per) out[lane * per + i] = __fdiv_rn(o[i], L);
}

}  // namespace

cudaError_t raw_attention(const AttnArgs& a, cudaStream_t s) {
  if (a.d % 32 || a.d > kMaxHeadDim || a.nkv < 1 || a.nh % a.nkv || a.max_splits < 1)
    return cudaErrorInvalidValue;
  GQ_KLAUNCH(launch(attn_split_kernel, dim3(dim3(a.T * a.nh, a.max_splits)), dim3(32), 0, s, a));
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  GQ_KLAUNCH(launch(attn_merge_kernel, dim3(a.T * a.nh), dim3(32), 0, s, a));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

// QK-norm, RoPE and the KV write of one decoder layer (laguna.md §1.3 steps 2–3): one warp per (row, head)
// over q, k and v heads, four warps a block. Bound: latency (a 2048-row prefill step has ~180k heads; a
// block per head paid five barriers and a block's start-up for each). FP32 math in the CPU reference's order
// (no contraction: __f*_rn), angles pos·inv_freq in FP32; the cache holds BF16.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = kMaxHeadDim / 32;  // element i = lane + 32·j of the head, j < kPerLane
static_assert(kPerLane == 8, "warp_sum_sq_f64 replays block_sum_f64<128> over 256 elements");

// The FP64 sum of squares that block_sum_f64<128> gives over a head's d ≤ 256 values, on one warp: thread
// i of that block held sq(i) + sq(i + 128) (0 past d), its tree added i + 64 to i, then i + 32 to i, then
// warp 0's shuffles 16 … 1. Lane l holds elements l + 32·j, so it forms threads l, l + 32, l + 64 and l + 96
// itself and then runs the same two levels and the same shuffles: the same additions in the same order.
__device__ __forceinline__ double warp_sum_sq_f64(const float (&v)[kPerLane], int lane, int d) {
  double th[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    double s = 0.0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = k + 4 * r;  // element lane + 32·k + 128·r
      if (lane + 32 * j < d) s += static_cast<double>(v[j]) * v[j];
    }
    th[k] = s;
  }
  double x = (th[0] + th[2]) + (th[1] + th[3]);
  for (int s = 16; s > 0; s >>= 1) x += __shfl_down_sync(0xffffffffu, x, s);
  return __shfl_sync(0xffffffffu, x, 0);
}

__global__ void __launch_bounds__(32 * kWarps) qk_rope_kv_kernel(const RopeArgs a) {
  __shared__ float u_all[kWarps][kMaxHeadDim];  // the normed head, for RoPE's partner element i ± rot/2
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int heads = a.nh + 2 * a.nkv;
  const long long item = static_cast<long long>(blockIdx.x) * kWarps + warp;
  const bool active = item < static_cast<long long>(a.T) * heads;
  const int t = active ? static_cast<int>(item / heads) : 0, hh = active ? static_cast<int>(item % heads) : 0;
  const int d = a.d;
  const bool is_q = hh < a.nh, is_k = !is_q && hh < a.nh + a.nkv;
  const int head = is_q ? hh : is_k ? hh - a.nh : hh - a.nh - a.nkv;
  // Every global load in one round trip: the model's norm weights and rotary frequencies before the wait,
  // then the head's values, the row's position and cache slot, and the page of a K/V row while the norm runs.
  const float* nw = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
  const bool rotate = is_q || is_k;
  const int half = a.rot / 2;
  float uv[kPerLane], wv[kPerLane], fq[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    wv[j] = active && nw && i < d ? nw[i] : 0.0f;
    fq[j] = active && rotate && i < a.rot ? a.inv_freq[i < half ? i : i - half] : 0.0f;
  }
  pdl_entry();
  if (!active) return;  // whole warps only: item is per warp
  const float* src = (is_q   ? a.q_src + t * a.ld_q
                      : is_k ? a.k_src + t * a.ld_k
                             : a.v_src + t * a.ld_v) +
                     static_cast<long long>(head) * d;
  const int pos = a.rows.pos[t];
  // A K/V head writes its row unless a full-attention row's page is shared (already in the cache).
  const bool writes = !is_q && (a.kv.sliding || !a.rows.kv_write || a.rows.kv_write[t]);
  const int slot = is_q ? 0 : a.rows.seq_slot[t];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    uv[j] = i < d ? src[i] : 0.0f;
  }
  uint16_t* dst = writes ? kv_row(a.kv, slot, pos, !is_k) + static_cast<long long>(head) * d : nullptr;
  if (nw) {  // rmsnorm_rows over the head's d values
    const float var = static_cast<float>(warp_sum_sq_f64(uv, lane, d) / static_cast<double>(d));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, a.eps)));
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) uv[j] = __fmul_rn(wv[j], __fmul_rn(uv[j], inv));
  }
  float* u = u_all[warp];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (lane + 32 * j < d) u[lane + 32 * j] = uv[j];
  __syncwarp();  // RoPE reads the partner element i ± rot/2
  float out[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + 32 * j;
    float v = uv[j];
    if (i < d && rotate && i < a.rot) {
      const float ang = __fmul_rn(static_cast<float>(pos), fq[j]);
      const float cs = __fmul_rn(cosf(ang), a.m), sn = __fmul_rn(sinf(ang), a.m);
      if (i < half)
        v = __fsub_rn(__fmul_rn(u[i], cs), __fmul_rn(u[i + half], sn));
      else
        v = __fadd_rn(__fmul_rn(u[i], cs), __fmul_rn(u[i - half], sn));
    }
    out[j] = v;
  }
  if (is_q) {
    float* q = a.q + (static_cast<long long>(t) * a.nh + head) * d;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if (lane + 32 * j < d) q[lane + 32 * j] = out[j];
    return;
  }
  if (!writes) return;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j)
    if (lane + 32 * j < d) dst[lane + 32 * j] = f32_to_bf16_bits(out[j]);
}

}  // namespace

cudaError_t raw_qk_rope_kv(const RopeArgs& a, cudaStream_t s) {
  if (a.d > kMaxHeadDim || a.T < 1) return cudaErrorInvalidValue;
  const long long items = static_cast<long long>(a.T) * (a.nh + 2 * a.nkv);
  const dim3 grid(static_cast<unsigned>((items + kWarps - 1) / kWarps));
  GQ_KLAUNCH(launch(qk_rope_kv_kernel, grid, dim3(32 * kWarps), 0, s, a));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

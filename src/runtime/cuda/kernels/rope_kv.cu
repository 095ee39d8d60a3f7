// QK-norm, RoPE and the KV write of one decoder layer (laguna.md §1.3 steps 2–3): one block per (row, head)
// over q, k and v heads. Bound: latency. FP32 math in the CPU reference's order (no contraction: __f*_rn),
// angles pos·inv_freq in FP32; the cache holds BF16.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) qk_rope_kv_kernel(const RopeArgs a) {
  __shared__ float u[kMaxHeadDim];
  __shared__ double red[kThreads];
  const int t = blockIdx.x, hh = blockIdx.y, d = a.d;
  const bool is_q = hh < a.nh, is_k = !is_q && hh < a.nh + a.nkv;
  const int head = is_q ? hh : is_k ? hh - a.nh : hh - a.nh - a.nkv;
  // Every global load of the block in one round trip: the model's norm weights and rotary frequencies
  // before the wait, then the head's values, the row's position and cache slot; then the page of a K/V row
  // while the norm runs (they were five dependent round trips: values, weights after the norm's barriers,
  // position, frequencies, slot and page after RoPE).
  constexpr int kR = kMaxHeadDim / kThreads;
  const float* nw = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
  const bool rotate = is_q || is_k;
  const int half = a.rot / 2;
  float uv[kR], wv[kR], fq[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = threadIdx.x + r * kThreads;
    wv[r] = nw && i < d ? nw[i] : 0.0f;
    fq[r] = rotate && i < a.rot ? a.inv_freq[i < half ? i : i - half] : 0.0f;
  }
  pdl_entry();
  const float* src = (is_q   ? a.q_src + t * a.ld_q
                      : is_k ? a.k_src + t * a.ld_k
                             : a.v_src + t * a.ld_v) +
                     static_cast<long long>(head) * d;
  const int pos = a.rows.pos[t];
  // A K/V head writes its row unless a full-attention row's page is shared (already in the cache).
  const bool writes = !is_q && (a.kv.sliding || !a.rows.kv_write || a.rows.kv_write[t]);
  const int slot = is_q ? 0 : a.rows.seq_slot[t];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = threadIdx.x + r * kThreads;
    uv[r] = i < d ? src[i] : 0.0f;
  }
  uint16_t* dst = writes ? kv_row(a.kv, slot, pos, !is_k) + static_cast<long long>(head) * d : nullptr;
  if (nw) {  // rmsnorm_rows over the head's d values (per-thread partials in ascending i, as a strided loop)
    double ss = 0.0;
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (threadIdx.x + r * kThreads < d) ss += static_cast<double>(uv[r]) * uv[r];
    const float var = static_cast<float>(block_sum_f64<kThreads>(ss, red) / static_cast<double>(d));
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, a.eps)));
#pragma unroll
    for (int r = 0; r < kR; ++r) uv[r] = __fmul_rn(wv[r], __fmul_rn(uv[r], inv));
  }
#pragma unroll
  for (int r = 0; r < kR; ++r)
    if (threadIdx.x + r * kThreads < d) u[threadIdx.x + r * kThreads] = uv[r];
  __syncthreads();  // RoPE reads the partner element i ± rot/2
  float out[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int i = threadIdx.x + r * kThreads;
    if (i >= d) break;
    float v = uv[r];
    if (!rotate || i >= a.rot) {
      out[r] = v;
      continue;
    }
    const float ang = __fmul_rn(static_cast<float>(pos), fq[r]);
    const float cs = __fmul_rn(cosf(ang), a.m), sn = __fmul_rn(sinf(ang), a.m);
    if (i < half)
      v = __fsub_rn(__fmul_rn(u[i], cs), __fmul_rn(u[i + half], sn));
    else
      v = __fadd_rn(__fmul_rn(u[i], cs), __fmul_rn(u[i - half], sn));
    out[r] = v;
  }
  if (is_q) {
    float* q = a.q + (static_cast<long long>(t) * a.nh + head) * d;
    for (int r = 0; r < kR; ++r) {
      const int i = threadIdx.x + r * kThreads;
      if (i < d) q[i] = out[r];
    }
    return;
  }
  if (!writes) return;
  for (int r = 0; r < kR; ++r) {
    const int i = threadIdx.x + r * kThreads;
    if (i < d) dst[i] = f32_to_bf16_bits(out[r]);
  }
}

}  // namespace

cudaError_t raw_qk_rope_kv(const RopeArgs& a, cudaStream_t s) {
  if (a.d > kMaxHeadDim || a.T < 1) return cudaErrorInvalidValue;
  GQ_KLAUNCH(launch(qk_rope_kv_kernel, dim3(dim3(a.T, a.nh + 2 * a.nkv)), dim3(kThreads), 0, s, a));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

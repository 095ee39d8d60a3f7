// Attention of the step's rows over their sequences' KV (paged full layers, ring sliding layers), prefill and
// decode alike: one warp per (row, head, split of kAttnSplitKeys key positions) item with an online softmax
// in FP32 over chunks of 32 keys, then one block per (row, head) folds the splits in split order. Splits are
// cut at fixed positions, so a row's result depends only on its own sequence (batch invariance), never on the
// step's other rows. Bound: KV bandwidth at long context, latency otherwise (the speed issue reworks this for
// full bandwidth).
#include <cfloat>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/attention_tc.h"
#include "runtime/cuda/kernels/attn_fold.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kPer = kMaxHeadDim / 32;  // dims per lane at most

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// dot + q[0..8) · the 8 BF16 keys values in w, fma by fma in element order.
__device__ __forceinline__ float dot8(const float* q, uint4 w, float dot) {
  const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    dot = fmaf(q[2 * e], bf16_bits_to_f32(ww[e] & 0xFFFF), dot);
    dot = fmaf(q[2 * e + 1], bf16_bits_to_f32(ww[e] >> 16), dot);
  }
  return dot;
}

// The splits a row reads: those holding a key of its window [j_lo, pos] (all of them non-empty).
struct RowSplits {
  int lo, n;
};
__device__ __forceinline__ RowSplits row_splits(const AttnArgs& a, int pos) {
  return {attn_first_split(a.window, pos), attn_row_splits(a.window, pos)};
}

// One (row, head, split) item: 32 keys at a time, lane l scores key j + l against q (staged in shared
// memory), the warp takes the chunk's max and sum with fixed butterflies, then every lane accumulates its
// d/32 output dims over the 32 keys in key order. kD = d (a template so the K row and the 32 V slices are all
// loaded before the first FMA; kD 0: any d, loads one at a time). The sums' order does not depend on kD.
template <int kD>
__device__ void attn_item(const AttnArgs& a, int th, int split, float* qs) {
  const int lane = threadIdx.x;
  const int t = th / a.nh, h = th % a.nh, kvh = h / (a.nh / a.nkv), d = kD ? kD : a.d, per = d / 32;
  const int pos = a.rows.pos[t], slot = a.rows.seq_slot[t];
  const int j_lo = attn_first_key(a.window, pos);
  const int j0 = max(j_lo, split * kAttnSplitKeys), j1 = min(pos + 1, (split + 1) * kAttnSplitKeys);
  float* part =
      a.partial +
      (static_cast<long long>(th) * a.max_splits + split - attn_first_split(a.window, pos)) * (d + 2);
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(d)));
  const float* qh = a.q + static_cast<long long>(th) * d;
  __syncwarp();
  for (int i = lane; i < d; i += 32) qs[i] = qh[i];
  __syncwarp();
  constexpr int kP = kD ? kD / 32 : kPer;
  float acc[kP];
#pragma unroll
  for (int i = 0; i < kP; ++i) acc[i] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int c0 = j0; c0 < j1; c0 += 32) {
    const int j = c0 + lane;
    float s = -FLT_MAX;
    // Lane l's key row and V slice pointers (one page-table read each), shared with the warp below.
    const uint16_t* krow = nullptr;
    const uint16_t* vrow = nullptr;
    if (j < j1) {
      krow = kv_row(a.kv, slot, j, false) + static_cast<long long>(kvh) * d;
      vrow = kv_row(a.kv, slot, j, true) + static_cast<long long>(kvh) * d + lane * per;
    }
    if (j < j1) {
      const uint4* kr = reinterpret_cast<const uint4*>(krow);
      float dot = 0.0f;
      if constexpr (kD > 0) {
        uint4 w[kD / 8];
#pragma unroll
        for (int v = 0; v < kD / 8; ++v) w[v] = kr[v];
#pragma unroll
        for (int v = 0; v < kD / 8; ++v) {
          dot = dot8(qs + 8 * v, w[v], dot);
        }
      } else {
        for (int v = 0; v < d / 8; ++v) {
          dot = dot8(qs + 8 * v, kr[v], dot);
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
    for (int i = 0; i < kP; ++i) acc[i] = __fmul_rn(acc[i], corr);
    const int n = min(32, j1 - c0);
    if constexpr (kD == 128) {  // 4 dims (8 bytes) per lane and key: all 32 slices in flight at once
      const unsigned long long vbase = reinterpret_cast<unsigned long long>(vrow) - lane * per * 2ULL;
      uint2 vv[32];
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        const unsigned long long b = __shfl_sync(0xffffffffu, vbase, jj);
        if (jj < n) vv[jj] = *reinterpret_cast<const uint2*>(b + lane * 8ULL);
      }
#pragma unroll
      for (int jj = 0; jj < 32; ++jj) {
        if (jj >= n) break;
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        acc[0] = fmaf(pj, bf16_bits_to_f32(vv[jj].x & 0xFFFF), acc[0]);
        acc[1] = fmaf(pj, bf16_bits_to_f32(vv[jj].x >> 16), acc[1]);
        acc[2] = fmaf(pj, bf16_bits_to_f32(vv[jj].y & 0xFFFF), acc[2]);
        acc[3] = fmaf(pj, bf16_bits_to_f32(vv[jj].y >> 16), acc[3]);
      }
    } else {
      for (int jj = 0; jj < n; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const uint16_t* vr = kv_row(a.kv, slot, c0 + jj, true) + static_cast<long long>(kvh) * d + lane * per;
#pragma unroll
        for (int i = 0; i < kP; ++i)
          if (i < per) acc[i] = fmaf(pj, bf16_bits_to_f32(vr[i]), acc[i]);
      }
    }
    m = mn;
  }
  if (lane == 0) part[0] = m, part[1] = l;
#pragma unroll
  for (int i = 0; i < kP; ++i)
    if (i < per) part[2 + lane * per + i] = acc[i];
}

// A fixed grid of warps walks the step's items (row, head, split of kAttnSplitKeys key positions), only the
// splits each row's window touches: the grid is the same at every position (graph replay), the work is what
// the positions need. Which warp takes an item does not change the item's arithmetic.
template <int kD>
__global__ void __launch_bounds__(32) attn_split_kernel(const AttnArgs a) {
  pdl_entry();
  __shared__ float qs[kMaxHeadDim];
  int total = 0;
  for (int t = 0; t < a.T; ++t) total += a.nh * row_splits(a, a.rows.pos[t]).n;
  for (int i = blockIdx.x; i < total; i += gridDim.x) {
    int r = i, t = 0;
    for (;; ++t) {
      const int items = a.nh * row_splits(a, a.rows.pos[t]).n;
      if (r < items) break;
      r -= items;
    }
    const RowSplits rs = row_splits(a, a.rows.pos[t]);
    attn_item<kD>(a, t * a.nh + r / rs.n, rs.lo + r % rs.n, qs);
  }
}

// One (row, head) per block of kMergeThreads: the fold of attn_fold.cuh in split order. The running maxima
// are a parallel scan (max is exact in any order), each split's weights (a_s, b_s, l_s·b_s) are computed once
// in parallel into shared memory, then every thread folds its dims (and L, the same chain in each) in split
// order, the split loop unrolled so its loads are in flight together (at 32k keys a row has 128 splits, and
// one warp walking them one dependent load at a time cost ~200 µs per layer). kLog2: the maxima are in the
// log2 domain (the tensor-core splits), else natural.
constexpr int kMergeThreads = 128;
// Floats of each of the merge's three shared arrays: max_splits rounded up to 8, because the unrolled split
// loop's remainder reads the weights as 16-byte vectors (up to 7 floats past the last split; a slice of one
// split per row had 8 bytes of shared memory and read 16: compute-sanitizer memcheck).
__host__ __device__ constexpr int merge_pitch(int max_splits) { return (max_splits + 7) / 8 * 8; }
template <bool kLog2>
__global__ void __launch_bounds__(kMergeThreads) attn_merge_kernel(const AttnArgs a) {
  extern __shared__ float wsm[];  // [3][merge_pitch]: a_s, b_s, l_s·b_s
  __shared__ float wmax[kMergeThreads / 32];
  pdl_entry();
  const int th = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, d = a.d, t = th / a.nh;
  const int pitch = merge_pitch(a.max_splits);
  const RowSplits rs = row_splits(a, a.rows.pos[t]);
  const float* base = a.partial + static_cast<long long>(th) * a.max_splits * (d + 2);  // slot 0: split rs.lo
  float carry = -INFINITY;  // the running maximum before this chunk of splits
  for (int c0 = 0; c0 < rs.n; c0 += kMergeThreads) {
    const int s = c0 + tid;
    const float ms = s < rs.n ? base[static_cast<long long>(s) * (d + 2)] : -INFINITY;
    float v = ms;  // inclusive max over the warp's splits up to s
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v = fmaxf(v, u);
    }
    if (lane == 31) wmax[warp] = v;
    __syncthreads();
    float before = carry;  // the maximum before this warp's first split
    for (int w = 0; w < warp; ++w) before = fmaxf(before, wmax[w]);
    const float Mn = fmaxf(before, v);
    const float up = __shfl_up_sync(0xffffffffu, Mn, 1);
    const float M = lane == 0 ? before : up;
    if (s < rs.n) {
      const FoldStep f = fold_step<kLog2>(M, Mn, ms);
      wsm[s] = f.a;
      wsm[pitch + s] = f.b;
      wsm[2 * pitch + s] = __fmul_rn(base[static_cast<long long>(s) * (d + 2) + 1], f.b);
    }
    for (int w = 0; w < kMergeThreads / 32; ++w) carry = fmaxf(carry, wmax[w]);
    __syncthreads();  // wmax is rewritten by the next chunk
  }
  float* out = a.o + static_cast<long long>(th) * d;
  for (int e = tid; e < d; e += kMergeThreads) {
    float o = 0.0f, L = 0.0f;
#pragma unroll 8
    for (int s = 0; s < rs.n; ++s) {
      const FoldStep f{wsm[s], wsm[pitch + s]};
      o = fold(o, base[static_cast<long long>(s) * (d + 2) + 2 + e], f);
      L = __fadd_rn(__fmul_rn(L, f.a), wsm[2 * pitch + s]);
    }
    out[e] = __fdiv_rn(o, L);
  }
}

cudaError_t launch_merge(const AttnArgs& a, bool log2, cudaStream_t s) {
  const size_t smem = 3ull * static_cast<size_t>(merge_pitch(a.max_splits)) * 4;
  auto kern = log2 ? attn_merge_kernel<true> : attn_merge_kernel<false>;
  if (const cudaError_t e = opt_in_smem(kern, smem); e != cudaSuccess) return e;
  return launch(kern, dim3(static_cast<unsigned>(a.T * a.nh)), dim3(kMergeThreads), smem, s, a);
}

}  // namespace

cudaError_t raw_attention(const AttnArgs& a, cudaStream_t s) {
  if (a.d % 32 || a.d > kMaxHeadDim || a.nkv < 1 || a.nh % a.nkv || a.max_splits < 1)
    return cudaErrorInvalidValue;
  // The grid: every item of the longest possible step, at most 32 one-warp blocks per SM (the residency
  // limit); the kernel walks the items the step's positions need.
  const int sms = device_sm_count(132);
  if (attention_tc_supported(a.d, a.nh, a.nkv)) {
    GQ_KLAUNCH(raw_attention_tc_splits(a, a.tile_warps, s));
    if (!a.fused) GQ_KLAUNCH(launch_merge(a, true, s));
    return cudaGetLastError();
  }
  const long long most = static_cast<long long>(a.T) * a.nh * a.max_splits;
  const dim3 grid(static_cast<unsigned>(most < 32LL * sms ? most : 32LL * sms));
  if (a.d == 128)
    GQ_KLAUNCH(launch(attn_split_kernel<128>, grid, dim3(32), 0, s, a));
  else if (a.d == 64)
    GQ_KLAUNCH(launch(attn_split_kernel<64>, grid, dim3(32), 0, s, a));
  else
    GQ_KLAUNCH(launch(attn_split_kernel<0>, grid, dim3(32), 0, s, a));
  GQ_KLAUNCH(launch_merge(a, false, s));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

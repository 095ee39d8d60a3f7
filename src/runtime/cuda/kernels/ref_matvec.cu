// The reference matvec: y = W·x̂ for every weight format gridq reads (BF16, F32, FP8 W8A8, NVFP4-CB and
// FP8-CB product rungs of any k, v1 and v2 scales), any row count, and expert stacks addressed by per-pair
// expert ids read on the device (graph-safe). It decodes canonical (on-disk) bytes exactly as format.md §5–§7
// and applies the input's activation contract (§14) itself. One warp per output row; lane l takes the
// 8-weight blocks 32s + l (for CB: codeword l of superblock s), a fixed order, then a fixed shuffle tree.
// Bound: correctness first — this is the path for shapes and rungs that have no tiled kernel yet.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  const uint32_t e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) return __int_as_float(0x7FC00000);
  if (e == 0)
    v = ldexpf(static_cast<float>(m), -9);
  else
    v = ldexpf(1.0f + static_cast<float>(m) * 0.125f, static_cast<int>(e) - 7);
  return (b & 0x80) ? -v : v;
}

__device__ __forceinline__ uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The 8 weights of block b (columns 8b … 8b+7) of row `row` as the CPU reference reconstructs them.
__device__ void weights8(const RefMatrix& w, const uint8_t* row, long long scale_idx, int b, float out[8]) {
  if (w.format == kRefBF16) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 8LL * b;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = 8 * b + j < w.cols ? bf16_bits_to_f32(p[j]) : 0.0f;
    return;
  }
  if (w.format == kRefF32) {
    const float* p = reinterpret_cast<const float*>(row) + 8LL * b;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = 8 * b + j < w.cols ? p[j] : 0.0f;
    return;
  }
  if (w.format == kRefFP8) {
    const uint8_t* p = row + 8LL * b;
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = 8 * b + j < w.cols ? e4m3_to_f32(p[j]) : 0.0f;
    return;
  }
  // CB: superblock s = b / 32, codeword c = b % 32.
  const int s = b / 32, c = b % 32;
  const int ts = 4 * w.k + (w.cb_fp8 ? 0 : (w.layout_version == 2 ? 9 : 16));
  const uint8_t* sb = row + static_cast<long long>(s) * ts;
  const int bit = c * w.k;
  const uint64_t code = (le64(sb + bit / 8) >> (bit % 8)) & ((w.k == 64 ? ~0ull : (1ull << w.k) - 1));
  int o = 0;
  for (int i = 0; i < w.n_sub; ++i) {
    const uint64_t idx = (code >> w.sub_off[i]) & ((1ull << w.sub_bits[i]) - 1);
    const float* tab = w.codebook + w.table_off[i] + idx * w.sub_dim;
    for (int q = 0; q < w.sub_dim; ++q) out[o++] = tab[q];
  }
  if (w.cb_fp8) {
    const float rs = w.row_scale[scale_idx];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = bf16_round(__fmul_rn(out[j], rs));
    return;
  }
  const int g = c / 2;  // fp4 scale group of 16 weights
  float scale;
  if (w.layout_version == 2) {
    const int E = sb[4 * w.k];
    const int code4 = (sb[4 * w.k + 1 + g / 2] >> (4 * (g & 1))) & 15;
    scale = ldexpf(w.v2_table[code4], E - 127);
  } else {
    scale = e4m3_to_f32(sb[4 * w.k + g]);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = bf16_round(__fmul_rn(out[j], scale));
}

__global__ void __launch_bounds__(kWarps * 32) ref_matvec_kernel(const RefArgs a) {
  pdl_entry();
  const RefMatrix& w = a.w;
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kWarps + (threadIdx.x >> 5), p = blockIdx.y;
  if (r >= w.rows) return;  // whole warps exit together
  const int e = a.ids ? a.ids[p] : 0;
  const uint8_t* row =
      w.data + static_cast<long long>(e) * w.expert_stride + static_cast<long long>(r) * w.row_bytes;
  const long long scale_idx = static_cast<long long>(e) * w.rows + r;
  const long long xrow = static_cast<long long>(p / a.x_div) * w.cols;
  const uint16_t* x = a.x_f32 ? nullptr : a.x + xrow;
  const float* xf = a.x_f32 ? a.x_f32 + xrow : nullptr;
  const int nb = (w.cols + 7) / 8, rounds = (nb + 31) / 32;
  // FP8 per-token contract: the row's absmax (every lane computes the same value).
  float tok_s = 1.0f;
  if (xf == nullptr && (w.act_bits == 8 || w.format == kRefFP8)) {
    float amax = 0.0f;
    for (int c = lane; c < w.cols; c += 32) amax = fmaxf(amax, fabsf(bf16_bits_to_f32(x[c])));
    for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    tok_s = fp8_token_scale(amax);
  }
  float acc = 0.0f;
  for (int i = 0; i < rounds; ++i) {
    const int b = 32 * i + lane;
    const bool live = b < nb;
    float xv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      xv[j] = live && 8 * b + j < w.cols ? (xf ? xf[8 * b + j] : bf16_bits_to_f32(x[8 * b + j])) : 0.0f;
    if (w.act_bits == 4) {  // FP4 group-16 QDQ: blocks 2g and 2g+1 are lanes l and l^1
      float ga = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) ga = fmaxf(ga, fabsf(xv[j]));
      ga = fmaxf(ga, __shfl_xor_sync(0xffffffffu, ga, 1));
      const float gs = fp4_group_scale(ga);
#pragma unroll
      for (int j = 0; j < 8; ++j) xv[j] = bf16_bits_to_f32(fp4_qdq_elem(xv[j], gs));
    } else if (w.act_bits == 8 || w.format == kRefFP8) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float q = e4m3_to_f32(fp8_quant_elem(xv[j], tok_s));
        xv[j] = w.format == kRefFP8 ? q : bf16_round(__fmul_rn(q, tok_s));
      }
    }
    if (!live) continue;
    float wv[8];
    weights8(w, row, scale_idx, b, wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = fmaf(wv[j], xv[j], acc);
  }
  for (int o = 16; o; o >>= 1) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, o));
  if (lane == 0) {
    float y = acc;
    if (w.format == kRefFP8) y = bf16_round(__fmul_rn(__fmul_rn(tok_s, w.row_scale[scale_idx]), acc));
    a.y[static_cast<long long>(p) * a.ld_y + r] = y;
  }
}

// BF16 weights with plain (act_bits 16) inputs, every column block whole and 16-byte aligned: the same sums
// in the same order as ref_matvec_kernel (lane l: blocks 32i + l, i ascending, 8 fmas each; then the tree),
// with the loads vectorised and kBatch rounds of them in flight at once. Without expert ids a warp takes NP
// consecutive tokens × NR consecutive rows, loading each weight vector once for its NP tokens and each
// activation vector once for its NR rows (the router's matvec of a prefill step: 8192 tokens × 256 rows,
// bound by those loads); each (token, row) sum is still its own chain, so NP and NR change no bits.
constexpr int kBatch = 6;
template <bool kXf32, int NP, int NR>
__global__ void __launch_bounds__(kWarps * 32) ref_matvec_bf16_kernel(const RefArgs a) {
  // Without expert ids the rows are the same every step (the router): the first column of blocks requests
  // its rows into L2 before waiting for the previous kernel, so that the loads below, issued once the
  // activations are ready, find the weights in L2 instead of paying the HBM latency after the wait.
  if (a.ids == nullptr && blockIdx.y == 0 && (threadIdx.x & 31) < NR) {
    const int r = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * NR + (threadIdx.x & 31);
    if (r < a.w.rows)
      prefetch_l2(a.w.data + static_cast<long long>(r) * a.w.row_bytes, static_cast<uint32_t>(a.w.row_bytes));
  }
  pdl_entry();
  constexpr int kB = NR == 1 ? kBatch : 2;  // rounds in flight (registers: NR weight vectors a round)
  const RefMatrix& w = a.w;
  const int lane = threadIdx.x & 31;
  const int r0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * NR, p0 = blockIdx.y * NP;
  if (r0 >= w.rows) return;
  const int e = a.ids ? a.ids[p0] : 0;  // NP == NR == 1 when there are ids
  const uint8_t* rows = w.data + static_cast<long long>(e) * w.expert_stride;
  const int np = min(NP, a.P - p0), nr = min(NR, w.rows - r0);
  const int nb = w.cols / 8, rounds = (nb + 31) / 32;
  float acc[NR][NP];
#pragma unroll
  for (int rr = 0; rr < NR; ++rr)
#pragma unroll
    for (int tp = 0; tp < NP; ++tp) acc[rr][tp] = 0.0f;
  for (int i0 = 0; i0 < rounds; i0 += kB) {
    uint4 wv[kB][NR];
#pragma unroll
    for (int q = 0; q < kB; ++q) {
      const int b = 32 * (i0 + q) + lane;
#pragma unroll
      for (int rr = 0; rr < NR; ++rr)
        if (b < nb && rr < nr)
          wv[q][rr] =
              __ldg(reinterpret_cast<const uint4*>(rows + static_cast<long long>(r0 + rr) * w.row_bytes) + b);
    }
#pragma unroll
    for (int tp = 0; tp < NP; ++tp) {
      if (tp >= np) break;
      const long long xrow = static_cast<long long>((p0 + tp) / a.x_div) * w.cols;
      uint4 xv[kB][2];
#pragma unroll
      for (int q = 0; q < kB; ++q) {
        const int b = 32 * (i0 + q) + lane;
        if (b >= nb) continue;
        if constexpr (kXf32) {
          xv[q][0] = __ldg(reinterpret_cast<const uint4*>(a.x_f32 + xrow) + 2 * b);
          xv[q][1] = __ldg(reinterpret_cast<const uint4*>(a.x_f32 + xrow) + 2 * b + 1);
        } else {
          xv[q][0] = __ldg(reinterpret_cast<const uint4*>(a.x + xrow) + b);
        }
      }
#pragma unroll
      for (int q = 0; q < kB; ++q) {
        if (32 * (i0 + q) + lane >= nb) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float xf;
          if constexpr (kXf32) {
            const uint4& v = xv[q][j / 4];
            const uint32_t xs[4] = {v.x, v.y, v.z, v.w};
            xf = __uint_as_float(xs[j % 4]);
          } else {
            const uint32_t xs[4] = {xv[q][0].x, xv[q][0].y, xv[q][0].z, xv[q][0].w};
            xf = bf16_bits_to_f32(static_cast<uint16_t>(xs[j / 2] >> (16 * (j & 1))));
          }
#pragma unroll
          for (int rr = 0; rr < NR; ++rr) {
            if (rr >= nr) break;
            const uint32_t ww[4] = {wv[q][rr].x, wv[q][rr].y, wv[q][rr].z, wv[q][rr].w};
            const float wf = bf16_bits_to_f32(static_cast<uint16_t>(ww[j / 2] >> (16 * (j & 1))));
            acc[rr][tp] = fmaf(wf, xf, acc[rr][tp]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < NR; ++rr) {
    if (rr >= nr) break;
#pragma unroll
    for (int tp = 0; tp < NP; ++tp) {
      if (tp >= np) break;
      float v = acc[rr][tp];
      for (int o = 16; o; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
      if (lane == 0) a.y[static_cast<long long>(p0 + tp) * a.ld_y + r0 + rr] = v;
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

cudaError_t raw_ref_matvec(const RefArgs& a, cudaStream_t s) {
  if (a.P < 1 || a.w.rows < 1 || a.w.cols < 1 || a.x_div < 1) return cudaErrorInvalidValue;
  if (a.x_f32 && (a.w.act_bits != 16 || a.w.format == kRefFP8)) return cudaErrorInvalidValue;
  const dim3 grid((a.w.rows + kWarps - 1) / kWarps, a.P);
  const bool fast = a.w.format == kRefBF16 && a.w.act_bits == 16 && a.w.cols % 8 == 0 &&
                    a.w.row_bytes % 16 == 0 && a.w.expert_stride % 16 == 0 && aligned16(a.w.data) &&
                    (a.x_f32 ? aligned16(a.x_f32) : aligned16(a.x));
  // Without ids a warp takes kNP tokens of its row; past kWideP tokens (decode batches past 16, prefill
  // steps) also kNR rows, or the shared-memory tiles: fewer warps, each reusing its activation loads over its
  // rows (no bits change: the sums are the same chains). Measured at an 8k prompt (router + its norm, 48
  // layers): kNR 1 / 2 / 4 / 8 → 135 / 101 / 115 / 156 ms (more rows a warp cost registers: 75 → 186, one CTA
  // an SM at 8). At a 64-row decode step the one-row warps read the step's 786 KB of FP32 rows once per
  // router row (200 MB of L2 reads a layer: 25 µs of the batch-64 step's router, H100 session 30); the tiles
  // from 16 rows gave batch 32 and 64 +2.2-2.5 % (session 31).
  constexpr int kNP = 8, kNR = 2, kWideP = 16;
  const dim3 grid_np(grid.x, static_cast<unsigned>((a.P + kNP - 1) / kNP));
  const dim3 grid_wide(static_cast<unsigned>((a.w.rows + kWarps * kNR - 1) / (kWarps * kNR)), grid_np.y);
  const bool wide = a.P > kWideP;
  if (fast && a.ids == nullptr && a.x_f32 && wide) {
    // Shared-memory tiles (ref_matvec_tiled.cu) where the shape allows, the same bits either way.
    const cudaError_t e = raw_ref_matvec_tiled(a, s);
    if (e != cudaErrorNotSupported) return e;
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<true, kNP, kNR>, grid_wide, dim3(kWarps * 32), 0, s, a));
  } else if (fast && a.ids == nullptr && wide)
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<false, kNP, kNR>, grid_wide, dim3(kWarps * 32), 0, s, a));
  else if (fast && a.ids == nullptr && a.x_f32)
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<true, kNP, 1>, dim3(grid_np), dim3(kWarps * 32), 0, s, a));
  else if (fast && a.ids == nullptr)
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<false, kNP, 1>, dim3(grid_np), dim3(kWarps * 32), 0, s, a));
  else if (fast && a.x_f32)
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<true, 1, 1>, dim3(grid), dim3(kWarps * 32), 0, s, a));
  else if (fast)
    GQ_KLAUNCH(launch(ref_matvec_bf16_kernel<false, 1, 1>, dim3(grid), dim3(kWarps * 32), 0, s, a));
  else
    GQ_KLAUNCH(launch(ref_matvec_kernel, dim3(grid), dim3(kWarps * 32), 0, s, a));
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

// The end of a tile's K-run in the GEMV engine (gemv_impl.cuh): the warp ranges of the work split, the
// split-K partials summed in warp order by the last warp to arrive, and the epilogues (store, SwiGLU, MoE
// down).
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/grid_sync.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

template <int NV>
__device__ __forceinline__ void zero(float (&a)[NV]) {
#pragma unroll
  for (int i = 0; i < NV; ++i) a[i] = 0.0f;
}

// Warp w's units are [w·U/T, (w+1)·U/T). The host keeps U·T < 2^32, so 32-bit unsigned math suffices (64-bit
// division is a long software sequence).
__device__ __forceinline__ unsigned range_start(unsigned w, unsigned U, unsigned T) { return w * U / T; }
__device__ __forceinline__ unsigned warp_of(unsigned u, unsigned U, unsigned T) {
  return ((u + 1) * T - 1) / U;
}

// SwiGLU of one fragment column: gate g0/g1 and up u0/u1 of rows g and g+8 of a 16-row tile →
// out = bf16(silu(bf16(gate))·bf16(up)); with qdq, then the FP4 activation QDQ (format.md §14.1) over the
// tile's 16 rows, which are one QDQ group: the 8 lanes with this t reduce by xor 4, 8, 16. Warp-collective
// (every lane calls it, qdq uniform); shared by the GEMV's kSwiglu epilogue and the grouped experts.
__device__ __forceinline__ void swiglu_column(float g0, float g1, float u0, float u1, bool qdq,
                                              uint16_t (&out)[2]) {
  const float hv[2] = {bf16_round(__fmul_rn(silu_f32(bf16_round(g0)), bf16_round(u0))),
                       bf16_round(__fmul_rn(silu_f32(bf16_round(g1)), bf16_round(u1)))};
  out[0] = f32_to_bf16_bits(hv[0]);
  out[1] = f32_to_bf16_bits(hv[1]);
  if (!qdq) return;
  float a = fmaxf(fabsf(hv[0]), fabsf(hv[1]));
  int nan = isnan(hv[0]) || isnan(hv[1]);
#pragma unroll
  for (int m = 4; m < 32; m <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, m));
    nan |= __shfl_xor_sync(0xffffffffu, nan, m);
  }
  const float s = fp4_group_scale(a);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) out[hh] = nan ? uint16_t{0x7FC0} : fp4_qdq_elem(hv[hh], s);
}

// End of a tile's K-run in one warp: a tile wholly inside the warp's range (`full`) goes straight to the
// epilogue; a split tile posts its FP32 partial (slot `first_slot`: 0 = the warp's first tile, 1 = its last)
// and the last of its warps to arrive sums all parts in warp order and runs the epilogue. `gw` is the warp's
// index among the T warps that split U units; every memory access that another block or a later phase may
// see goes through L2 (st.cg / ld.cg), so the same code serves the single kernel and the persistent chain.
template <int NT, int MODE, int NO>
__device__ __forceinline__ void finish_tile(const KParams& p, float (&v)[NO], unsigned tile, bool full,
                                            int first_slot, unsigned gw, unsigned U, unsigned T, unsigned uSq,
                                            int lane) {
  const int g = lane >> 2, t = lane & 3, M = p.M;
  bool do_epilogue = full;
  if (!full) {
    const int slot = first_slot;
    float* part = p.partials + (static_cast<size_t>(gw) * 2 + slot) * NO * 32;
#pragma unroll
    for (int i = 0; i < NO; ++i) __stcg(part + i * 32 + lane, v[i]);
    // Lane 0 publishes the warp's partial (ordered before it by __syncwarp) with a release RMW; the last
    // arriver's acquire makes every part visible to it. No full fences: they also wait for the warp's
    // earlier loads still in flight.
    __syncwarp();
    int old = 0;
    if (lane == 0)
      old = static_cast<int>(atom_add_acq_rel_gpu(reinterpret_cast<unsigned*>(p.counters + tile), 1));
    old = __shfl_sync(0xffffffffu, old, 0);
    const unsigned wf = warp_of(tile * uSq, U, T), wl = warp_of(tile * uSq + uSq - 1, U, T);
    // Warps in [wf, wl] with a non-empty range all hold a part of this tile (empty ranges only occur when
    // a MoE launch has fewer units than warps).
    int nparts = 0;
    for (unsigned w = wf; w <= wl; ++w) nparts += range_start(w, U, T) < range_start(w + 1, U, T);
    if (old == nparts - 1) {
      __syncwarp();  // the other lanes' partial loads are ordered after lane 0's acquire
#pragma unroll
      for (int i = 0; i < NO; ++i) v[i] = 0.0f;
      // Sum the parts in warp order (deterministic); the loads of a batch are independent, so a batch
      // costs one L2 round trip.
      constexpr int kB = NO <= 8 ? 8 : 4;
      for (unsigned w0 = wf; w0 <= wl; w0 += kB) {
        float buf[kB][NO];
#pragma unroll
        for (int j = 0; j < kB; ++j) {
          const unsigned w = w0 + j;
          const unsigned ws = range_start(w, U, T);
          const bool ok = w <= wl && ws < range_start(w + 1, U, T);
          const int ps = tile == ws / uSq ? 0 : 1;
          const float* src = p.partials + (static_cast<size_t>(w) * 2 + ps) * NO * 32;
#pragma unroll
          for (int i = 0; i < NO; ++i) buf[j][i] = ok ? __ldcg(src + i * 32 + lane) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kB; ++j)
#pragma unroll
          for (int i = 0; i < NO; ++i) v[i] += buf[j][i];
      }
      if (lane == 0) p.counters[tile] = 0;
      do_epilogue = true;
    }
  }
  if (do_epilogue) {
    // ---- epilogues. Fragment: v[nt*4 + i]: row g + 8·(i >> 1), token 8·nt + 2t + (i & 1).
    // Both epilogues issue every load (scales, the residual's or the addend's old values) before their first
    // store: the compiler cannot tell that y aliases none of them, so element by element each store waited
    // out its own loads' L2 round trip — 32 a lane at 64 rows, a quarter of a batch-64 split GEMM's stall
    // samples (ncu, session 41). Each element is computed as before.
    const int rbase = static_cast<int>(tile) * 16;
    // kC token tiles a round trip (all of them at once held too many addresses: spills at 64 rows).
    constexpr int kC = NT < 2 ? NT : 2;
    static_assert(NT % kC == 0, "chunks of kC token tiles cover the NT tiles exactly");
    // f(c, i, n, o) for the fragment's elements of token tiles nt0 … nt0 + kC − 1 that hold a row (n < M):
    // tile nt0 + c, element i, token n, y offset o.
    auto chunk = [&](int nt0, auto&& f) {
#pragma unroll
      for (int c = 0; c < kC; ++c)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = 8 * (nt0 + c) + 2 * t + (i & 1), row = rbase + g + 8 * (i >> 1);
          if (n < M) f(c, i, n, static_cast<long long>(n) * p.rows + row);
        }
    };
    if constexpr (MODE == kStore) {
      const bool scaled = p.row_scale != nullptr, accum = p.y_f32 && p.y_accum;
      float rs[2] = {0.0f, 0.0f};
      if (scaled) rs[0] = p.row_scale[rbase + g], rs[1] = p.row_scale[rbase + g + 8];
#pragma unroll
      for (int nt0 = 0; nt0 < NT; nt0 += kC) {
        float xs[kC][2] = {}, old[kC][4] = {};
        chunk(nt0, [&](int c, int i, int n, long long o) {
          if (scaled && i < 2) xs[c][i] = __ldcg(p.xscale + n);
          if (accum) old[c][i] = static_cast<const float*>(p.y)[o];
        });
        chunk(nt0, [&](int c, int i, int, long long o) {
          float val = v[(nt0 + c) * 4 + i];
          if (scaled) val = __fmul_rn(__fmul_rn(xs[c][i & 1], rs[i >> 1]), val);
          if (p.y_f32)
            static_cast<float*>(p.y)[o] = accum ? __fadd_rn(old[c][i], val) : val;
          else
            static_cast<uint16_t*>(p.y)[o] = f32_to_bf16_bits(val);
        });
      }
    } else if constexpr (MODE == kSwiglu) {
      const int slot = static_cast<int>(tile / p.R), r = static_cast<int>(tile % p.R);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {  // token column 2t + c
          const int n = 8 * nt + 2 * t + c;
          uint16_t out[2];
          swiglu_column(v[nt * 4 + c], v[nt * 4 + 2 + c], v[NT * 4 + nt * 4 + c], v[NT * 4 + nt * 4 + 2 + c],
                        p.qdq_fp4 != 0, out);
          if (n < M) {
            uint16_t* h =
                static_cast<uint16_t*>(p.y) + (static_cast<long long>(slot) * M + n) * p.rows + r * 16;
            h[g] = out[0];
            h[g + 8] = out[1];
          }
        }
    } else {  // kMoeDown
#pragma unroll
      for (int nt0 = 0; nt0 < NT; nt0 += kC) {
        float add[kC][4] = {};
        chunk(nt0, [&](int c, int i, int, long long o) {
          if (p.add) add[c][i] = __ldcg(p.add + o);
        });
        chunk(nt0, [&](int c, int i, int, long long o) {
          float val = __fmul_rn(p.out_scale, v[(nt0 + c) * 4 + i]);
          if (p.add) val = __fadd_rn(val, add[c][i]);
          static_cast<uint16_t*>(p.y)[o] = f32_to_bf16_bits(val);
        });
      }
    }
  }
}

}  // namespace gridq::cuda::detail

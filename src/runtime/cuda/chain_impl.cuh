// The persistent GEMV chain: one launch runs n GEMV phases (one format, one mode) back to back on a grid of
// one block per SM (16 warps; 8 for more than 8 tokens), all resident.
//
// Why: a stack of separate kernels pays, per kernel, the launch, the fill of an empty pipeline, the drain of
// the last loads and split-K reductions, and the grid's completion before the next kernel may read its
// activations — about 6–10 µs measured on the H200 whatever the matrix size (docs/kernels.md §6). Here the
// weight stream never drains: each warp's cp.async ring is filled in the warp's global order over ALL
// phases, so while phase i finishes (last units, split-K reductions, the grid barrier) the ring already
// holds phase i+1's (and later) weight bytes. Only activations wait for the barrier.
//
// Per phase the work split, decoders, split-K and epilogues are those of the single-kernel engine
// (gemv_impl.cuh): each warp takes an equal contiguous range of units; warps are ranked across blocks first
// (rank = warp · blocks + block) so a phase that uses fewer warps (`warps`, from the launcher's
// min-bytes-per-warp rule) still spreads over every SM.
#pragma once

#include "runtime/cuda/gemv_impl.cuh"
#include "runtime/cuda/grid_sync.cuh"
#include "runtime/cuda/mbarrier.cuh"

namespace gridq::cuda::detail {

inline constexpr int kChainSmemBudget = 227 * 1024 - 1024;  // opt-in maximum per block, less a margin

// Warps per block, from the registers a warp needs (ptxas, sm_90a): 16 (≤ 128 registers) for BF16 and FP8
// up to 8 tokens; 12 for the CB decoders (≈ 140 with the chain's issue state: at 16 warps they spilled);
// 8 for 9..16 tokens, whose two token tiles need 150–250.
template <class Dec, int NT>
constexpr int chain_warps() {
  return NT == 2 ? 8 : (Dec::kSmemBytes > 0 ? 12 : 16);
}
inline constexpr int kChainMaxStages = 16;
// Shared memory: decode tables, then each warp's ring of stages, then each warp's stage mbarriers.
template <class Dec, int NT>
constexpr int chain_mbar_bytes() {
  return chain_warps<Dec, NT>() * kChainMaxStages * 8;
}
template <class Dec, int NT, int MODE>
constexpr int chain_stages() {
  constexpr int np = MODE == kSwiglu ? 2 : 1;
  constexpr int s = (kChainSmemBudget - Dec::kSmemBytes - chain_mbar_bytes<Dec, NT>()) /
                    (chain_warps<Dec, NT>() * np * Dec::kUnitBytes);
  return s > kChainMaxStages ? kChainMaxStages : s;
}
template <class Dec, int NT, int MODE>
constexpr int chain_ring_offset_end() {
  return Dec::kSmemBytes +
         chain_warps<Dec, NT>() * chain_stages<Dec, NT, MODE>() * (MODE == kSwiglu ? 2 : 1) * Dec::kUnitBytes;
}
template <class Dec, int NT, int MODE>
constexpr int chain_smem_bytes() {
  return chain_ring_offset_end<Dec, NT, MODE>() + chain_mbar_bytes<Dec, NT>();
}

// CB phases share the block's decode tables; they are rebuilt between phases only when the codebook or the
// v2 scale table changes.
__device__ __forceinline__ bool same_tables(const KParams& a, const KParams& b) {
  if (a.codebook != b.codebook) return false;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (a.stab[i] != b.stab[i]) return false;
  return true;
}

template <class Dec, int NT, int MODE>
__global__ void __launch_bounds__(chain_warps<Dec, NT>() * 32, 1)
    chain_kernel(const __grid_constant__ ChainParams c) {
  static_assert(MODE == kStore || MODE == kSwiglu, "the chain runs kStore and kSwiglu phases");
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int NP = MODE == kSwiglu ? 2 : 1;
  constexpr int NV = NP * NT * 4;
  constexpr int kWarps = chain_warps<Dec, NT>();
  constexpr int kStages = chain_stages<Dec, NT, MODE>();
  static_assert(kStages >= 2, "chain ring needs at least two stages");
  constexpr int kStageBytes = NP * Dec::kUnitBytes;
  constexpr int kChunks = Dec::kUnitBytes / 16;

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const unsigned warp = threadIdx.x >> 5;
  const unsigned nblocks = gridDim.x;
  const unsigned Ttot = nblocks * kWarps;
  const unsigned rank = warp * nblocks + blockIdx.x;
  uint8_t* ring = smem + Dec::kSmemBytes + warp * kStages * kStageBytes;
  uint64_t* mbar = reinterpret_cast<uint64_t*>(smem + chain_ring_offset_end<Dec, NT, MODE>()) +
                   warp * kChainMaxStages;  // bulk mode: stage j of this warp completes on mbar[j]
  const bool bulk = c.bulk != 0;

  // This warp's unit range [u0, u1) of phase ph, out of U units split over T warps.
  auto range = [&](int ph, unsigned& U, unsigned& T, unsigned& u0, unsigned& u1) {
    const KParams& p = c.ph[ph];
    U = static_cast<unsigned>(p.R) * static_cast<unsigned>(p.S);
    T = p.warps > 0 && static_cast<unsigned>(p.warps) < Ttot ? static_cast<unsigned>(p.warps) : Ttot;
    u0 = u1 = 0;
    if (rank < T) {
      u0 = range_start(rank, U, T);
      u1 = range_start(rank + 1, U, T);
    }
  };

  // ---- issue side: this warp's units of all phases, in order, into the ring. Units of a plain or fused
  // matrix are contiguous in memory (tile-major), so a pointer is the whole cursor.
  int ip = -1;
  unsigned iu = 0, iu1 = 0, issued = 0;
  const uint8_t* iw = nullptr;
  long long iRSu = 0;  // fused gate+up: gate tile -> up tile
  auto issue = [&]() {
    while (iu >= iu1 && ip + 1 < c.n) {
      ++ip;
      unsigned U, T;
      range(ip, U, T, iu, iu1);
      iw = c.ph[ip].w + static_cast<long long>(iu) * Dec::kUnitBytes;
      iRSu = static_cast<long long>(c.ph[ip].R) * c.ph[ip].S * Dec::kUnitBytes;
    }
    if (iu < iu1) {
      const unsigned slot = issued % kStages;
      uint8_t* dst = ring + slot * kStageBytes;
      if (bulk) {
        if (lane == 0) {
          fence_proxy_async_smem();  // the stage's previous contents were read through the generic proxy
          mbar_arrive_expect_tx(mbar + slot, kStageBytes);
          bulk_copy_g2s(dst, iw, Dec::kUnitBytes, mbar + slot);
          if constexpr (NP == 2)
            bulk_copy_g2s(dst + Dec::kUnitBytes, iw + iRSu, Dec::kUnitBytes, mbar + slot);
        }
      } else {
        for (int ch = lane; ch < kChunks; ch += 32) {
          cp_async16(dst + 16 * ch, iw + 16 * ch);
          if constexpr (NP == 2) cp_async16(dst + Dec::kUnitBytes + 16 * ch, iw + iRSu + 16 * ch);
        }
      }
      iw += Dec::kUnitBytes;
      ++iu;
      ++issued;
    }
    if (!bulk) cp_async_commit();
  };

  Dec::init_smem(smem, c.ph[0]);
  if (bulk && lane == 0) {
    for (int j = 0; j < kStages; ++j) mbar_init(mbar + j, 1);
    mbar_init_fence();
  }
  __syncthreads();
  // Weights do not depend on the previous kernel: fill the ring before waiting for it.
#pragma unroll 1
  for (int i = 0; i < kStages - 1; ++i) issue();
  if (c.pdl) pdl_wait();
  // Dependents may launch only once every block of this grid is resident (a dependent block holding an SM
  // while a block of ours waits for it would deadlock the grid barrier): after the first barrier, or at once
  // for a single phase.
  if (c.pdl && c.n == 1) pdl_launch_dependents();

  unsigned consumed = 0;
  for (int ph = 0; ph < c.n; ++ph) {
    const KParams& p = c.ph[ph];
    if (ph > 0) {
      grid_sync(c.bar, nblocks);
      if (c.pdl && ph == c.n - 1) pdl_launch_dependents();
      if constexpr (Dec::kSmemBytes > 0) {
        if (!same_tables(c.ph[ph - 1], p)) {
          Dec::init_smem(smem, p);
          __syncthreads();
        }
      }
    }
    if (c.trace != nullptr && threadIdx.x == 0)
      c.trace[(static_cast<size_t>(ph) * nblocks + blockIdx.x) * 2] = global_timer_ns();
    unsigned U, T, u0, u1;
    range(ph, U, T, u0, u1);
    const int M = p.M;
    if (u0 < u1) {
      float acc[NV];
      zero(acc);
      typename Dec::Frag cur[NP];
      // Activations of the unit at K-slice s, token n = 8·nt + g; loaded one unit ahead.
      auto load_x = [&](unsigned s, typename Dec::XFrag(&xf)[NT]) {
        const long long xoff = static_cast<long long>(s) * Dec::kUnitK;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int n = 8 * nt + g;
          if constexpr (std::is_same_v<Dec, DecFP8>)
            Dec::template load_x<true>(
                xf[nt], static_cast<const uint8_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t, n < M);
          else
            Dec::template load_x<true>(
                xf[nt], static_cast<const uint16_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t, n < M);
        }
      };
      const unsigned S = static_cast<unsigned>(p.S);
      unsigned tile = u0 / S, s = u0 % S;  // the current unit's tile and K-slice
      typename Dec::XFrag xf[NT], xn[NT];
      load_x(s, xf);
      unsigned seg_begin = u0;
      const unsigned first_tile = tile;
#pragma unroll 1
      for (unsigned u = u0; u < u1; ++u) {
        __syncwarp();  // every lane has read the stage that this issue overwrites
        issue();
        if (bulk) {
          mbar_wait(mbar + consumed % kStages, (consumed / kStages) & 1);
        } else {
          cp_async_wait<kStages - 1>();
          __syncwarp();
        }
        {
          const uint8_t* st = ring + (consumed % kStages) * kStageBytes;
          Dec::load(cur[0], st, lane);
          if constexpr (NP == 2) Dec::load(cur[1], st + Dec::kUnitBytes, lane);
          ++consumed;
        }
        if (u + 1 < u1) load_x(s + 1 == S ? 0 : s + 1, xn);
#pragma unroll
        for (int pi = 0; pi < NP; ++pi) {
          float(&a)[NT][4] = *reinterpret_cast<float(*)[NT][4]>(acc + pi * NT * 4);
          Dec::template mma<NT>(cur[pi], xf, a, smem, lane);
        }
        if (s == S - 1 || u + 1 == u1) {
          const bool full = seg_begin == tile * S && s == S - 1;
          finish_tile<NT, MODE>(p, acc, tile, full, tile == first_tile ? 0 : 1, rank, U, T, S, lane);
          zero(acc);
          seg_begin = u + 1;
        }
        if (++s == S) s = 0, ++tile;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xf[nt] = xn[nt];
      }
    }
    if (c.trace != nullptr && lane == 0)
      atomicMax(c.trace + (static_cast<size_t>(ph) * nblocks + blockIdx.x) * 2 + 1, global_timer_ns());
  }
  if (!bulk) cp_async_wait<0>();
}

}  // namespace gridq::cuda::detail

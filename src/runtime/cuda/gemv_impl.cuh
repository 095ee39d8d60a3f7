// The GEMV engine shared by every weight format.
//
// Work split: a weight matrix is a grid of units (16-row tile × K-slice, relayout.h). The units are numbered
// tile-major and cut into T equal contiguous ranges, one per warp (T = all warps of a single-wave grid), so
// every warp streams the same number of bytes whatever the shape. A tile that falls into one warp's range is
// finished by that warp; a tile split between warps is finished by the last one to arrive (atomic counter),
// which sums the partials of all its warps in warp order: the result does not depend on timing.
//
// Per unit a lane holds rows g and g+8 of the tile (g = lane/4) and a contiguous K-run of them; the tensor
// core (mma.sync, M = 16 weight rows, N = 8 tokens) does the dot products. Decoders (Dec*) turn a unit's
// bytes into BF16 or E4M3 A-fragments; the engine handles loads, prefetch, split-K and the epilogues.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/gemv_decoders.cuh"
#include "runtime/cuda/gemv_finish.cuh"
#include "runtime/cuda/grid_sync.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kThreads = kWarpsPerBlock * 32;
inline constexpr int kThreadsPerBlock = kThreads;

// The GEMV's grid cut down to tile-aligned ranges: when its T = 8·blocks warps are at least the matrix's R
// tiles, T becomes R·P (at most half as many warps, a multiple of the block's 8), so warp w = tile·P + j
// holds units [tile·S + j·S/P, tile·S + (j+1)·S/P): every tile's K-run is cut into the same P parts at the
// same K-units. The GEMM (gemm_impl.cuh) can then give each part its own CTA at small M (split-K) and fold
// the parts in the GEMV's order. A function of (blocks, R) alone, so still of the matrix alone.
__host__ __device__ constexpr long long tile_aligned_blocks(long long blocks, long long tiles) {
  const long long T = blocks * kWarpsPerBlock;
  if (tiles < 1 || T < tiles) return blocks;
  for (long long P = T / tiles; P >= 1 && 2 * tiles * P >= T; --P)
    if (tiles * P % kWarpsPerBlock == 0) return tiles * P / kWarpsPerBlock;
  return blocks;
}
static_assert(tile_aligned_blocks(264, 192) == 264 && tile_aligned_blocks(264, 512) == 256 &&
              tile_aligned_blocks(264, 768) == 192 && tile_aligned_blocks(8, 5) == 5 &&
              tile_aligned_blocks(65, 65) == 65 && tile_aligned_blocks(10, 100) == 10);

// ---------------------------------------------------------------------------------------------------------
// Unit cursor: which tile / K-slice / slot a unit index is, and where its bytes are.

template <class Dec, int MODE>
struct Cursor {
  int tile, q, slot, s, r;
  const uint8_t* w;  // this unit's bytes (kSwiglu: the gate tile; the up tile is + R·S units)

  __device__ void set(unsigned u, const KParams& p, int Sq) {
    if constexpr (MODE == kMoeDown) {
      tile = r = static_cast<int>(u / static_cast<unsigned>(Sq));
      q = static_cast<int>(u % static_cast<unsigned>(Sq));
      slot = q / p.S;
      s = q % p.S;
    } else {
      tile = static_cast<int>(u / static_cast<unsigned>(p.S));
      q = s = static_cast<int>(u % static_cast<unsigned>(p.S));
      slot = tile / p.R;
      r = tile % p.R;
    }
    rebase(p);
  }
  __device__ void rebase(const KParams& p) {
    long long e = 0;
    if (p.slot_expert != nullptr && slot < p.max_slots) e = __ldg(p.slot_expert + slot);
    w = p.w + p.expert_stride * e + (static_cast<long long>(r) * p.S + s) * Dec::kUnitBytes;
  }
  __device__ void next(const KParams& p, int Sq) {
    ++s;
    ++q;
    if constexpr (MODE == kMoeDown) {
      if (s == p.S) {
        s = 0;
        ++slot;
        if (q == Sq) {
          q = 0;
          slot = 0;
          ++tile;
          ++r;
        }
        rebase(p);
        return;
      }
    } else {
      if (s == p.S) {
        s = 0;
        q = 0;
        ++tile;
        if (++r == p.R) {
          r = 0;
          ++slot;
          rebase(p);
          return;
        }
      }
    }
    w += Dec::kUnitBytes;
  }
};

// Depth of the per-warp shared-memory ring and the kernel's dynamic shared memory (tables + rings).
template <class Dec, int MODE>
constexpr int ring_stages() {
  return MODE == kSwiglu && Dec::kUnitBytes >= 2048 ? 3 : 4;
}
template <class Dec, int MODE>
constexpr int kernel_smem_bytes() {
  return Dec::kSmemBytes +
         kWarpsPerBlock * ring_stages<Dec, MODE>() * (MODE == kSwiglu ? 2 : 1) * Dec::kUnitBytes;
}

template <class Dec, int NT, int MODE>
__device__ __forceinline__ void gemv_body(const KParams& p, unsigned char* smem) {
  constexpr int NP = MODE == kSwiglu ? 2 : 1;  // tiles per unit
  constexpr int NV = NP * NT * 4;              // accumulator floats per lane
  constexpr int kPD = (16384 / (Dec::kUnitBytes * NP)) > 1 ? 16384 / (Dec::kUnitBytes * NP) : 1;
  const bool stamp = p.trace != nullptr && threadIdx.x == 0;
  if (stamp) p.trace[blockIdx.x * 4] = global_timer_ns();

  Dec::init_smem(smem, p);
  __syncthreads();
  if (stamp) p.trace[blockIdx.x * 4 + 1] = global_timer_ns();
  pdl_launch_dependents();

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const unsigned T = gridDim.x * kWarpsPerBlock;
  const unsigned gw = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  const bool moe = p.slot_expert != nullptr;

  int nslots = 1;
  if (moe) {
    pdl_wait();
    nslots = *p.nslots;
  }
  const int Sq = MODE == kMoeDown ? nslots * p.S : p.S;
  const unsigned tiles = MODE == kMoeDown ? p.R : static_cast<unsigned>(nslots) * p.R;
  const unsigned U = tiles * Sq;
  const unsigned u0 = range_start(gw, U, T), u1 = range_start(gw + 1, U, T);
  const long long RSu = static_cast<long long>(p.R) * p.S * Dec::kUnitBytes;  // gate -> up offset

  // L2 prefetch runs kPD units ahead of the loads; dense weights do not depend on the previous kernel, so
  // the first kPD units are requested before waiting for it.
  Cursor<Dec, MODE> pc;
  unsigned pu = p.l2_prefetch ? u0 : u1;
  if (pu < u1) {
    pc.set(u0, p, Sq);
    for (; pu < u1 && pu < u0 + kPD; ++pu) {
      if (lane == 0) {
        prefetch_l2(pc.w, Dec::kUnitBytes);
        if (NP == 2) prefetch_l2(pc.w + RSu, Dec::kUnitBytes);
      }
      pc.next(p, Sq);
    }
  }
  // Weight units stream through a per-warp ring of kStages shared-memory buffers filled by cp.async, so
  // kStages-1 units per warp are in flight while one is decoded. Each lane copies 16-byte chunks; after the
  // group completes the warp synchronises and every lane reads its fragment from the stage.
  constexpr int kStages = ring_stages<Dec, MODE>();
  constexpr int kStageBytes = NP * Dec::kUnitBytes;
  constexpr int kChunks = Dec::kUnitBytes / 16;
  uint8_t* ring = smem + Dec::kSmemBytes + (threadIdx.x >> 5) * kStages * kStageBytes;
  Cursor<Dec, MODE> ic;
  unsigned iu = u0;
  auto issue = [&]() {
    if (iu < u1) {
      uint8_t* dst = ring + ((iu - u0) % kStages) * kStageBytes;
      for (int c = lane; c < kChunks; c += 32) {
        cp_async16(dst + 16 * c, ic.w + 16 * c);
        if constexpr (NP == 2) cp_async16(dst + Dec::kUnitBytes + 16 * c, ic.w + RSu + 16 * c);
      }
      ic.next(p, Sq);
      ++iu;
    }
    cp_async_commit();
  };
  // Dense weights do not depend on the previous kernel: start the ring before waiting for it.
  if (u0 < u1) {
    ic.set(u0, p, Sq);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue();
  }
  if (!moe) pdl_wait();
  if (stamp) p.trace[blockIdx.x * 4 + 2] = global_timer_ns();
  if (u0 >= u1) return;

  const int M = p.M;
  float acc[NV], tot[NT * 4];
  zero(acc);
  if constexpr (MODE == kMoeDown) zero(tot);
  Cursor<Dec, MODE> cc;
  cc.set(u0, p, Sq);
  Cursor<Dec, MODE> nc = cc;
  typename Dec::Frag cur[NP];
  // Activations of a unit, token n = 8·nt + g; loaded one unit ahead.
  auto load_x = [&](const Cursor<Dec, MODE>& c, typename Dec::XFrag(&xf)[NT]) {
    const long long xoff = (MODE == kMoeDown ? static_cast<long long>(c.slot) * M * p.K : 0) +
                           static_cast<long long>(c.s) * Dec::kUnitK;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = 8 * nt + g;
      if constexpr (std::is_same_v<Dec, DecFP8>)
        Dec::load_x(xf[nt], static_cast<const uint8_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t,
                    n < M);
      else
        Dec::load_x(xf[nt], static_cast<const uint16_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t,
                    n < M);
    }
  };
  typename Dec::XFrag xf[NT], xn[NT];
  load_x(cc, xf);
  unsigned seg_begin = u0;
  const unsigned first_tile = u0 / static_cast<unsigned>(Sq);

  for (unsigned u = u0; u < u1; ++u) {
    __syncwarp();  // every lane has read the stage that the next issue overwrites
    issue();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    {
      const uint8_t* st = ring + ((u - u0) % kStages) * kStageBytes;
      Dec::load(cur[0], st, lane);
      if constexpr (NP == 2) Dec::load(cur[1], st + Dec::kUnitBytes, lane);
    }
    if (u + 1 < u1) {
      nc.next(p, Sq);
      load_x(nc, xn);
    }
    if (pu < u1) {
      if (lane == 0) {
        prefetch_l2(pc.w, Dec::kUnitBytes);
        if (NP == 2) prefetch_l2(pc.w + RSu, Dec::kUnitBytes);
      }
      pc.next(p, Sq);
      ++pu;
    }
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) {
      float(&a)[NT][4] = *reinterpret_cast<float(*)[NT][4]>(acc + pi * NT * 4);
      Dec::template mma<NT>(cur[pi], xf, a, smem, lane);
    }

    const bool tile_end = cc.q == Sq - 1 || u + 1 == u1;
    if constexpr (MODE == kMoeDown) {
      if (cc.s == p.S - 1 || u + 1 == u1) {  // end of this slot's run: fold with the routing weights
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = 8 * nt + 2 * t + (i & 1);
            const float wgt = n < M ? __ldg(p.slot_weight + static_cast<long long>(cc.slot) * M + n) : 0.0f;
            tot[nt * 4 + i] = fmaf(wgt, acc[nt * 4 + i], tot[nt * 4 + i]);
            acc[nt * 4 + i] = 0.0f;
          }
      }
    }
    if (tile_end) {
      const unsigned tile = static_cast<unsigned>(cc.tile);
      const unsigned uSq = static_cast<unsigned>(Sq);
      const bool full = seg_begin == tile * uSq && cc.q == Sq - 1;
      if constexpr (MODE == kMoeDown)
        finish_tile<NT, MODE>(p, tot, tile, full, tile == first_tile ? 0 : 1, gw, U, T, uSq, lane);
      else
        finish_tile<NT, MODE>(p, acc, tile, full, tile == first_tile ? 0 : 1, gw, U, T, uSq, lane);
      zero(acc);
      if constexpr (MODE == kMoeDown) zero(tot);
      seg_begin = u + 1;
    }
    cc = nc;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xf[nt] = xn[nt];
  }
}

template <class Dec, int NT, int MODE>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const KParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  gemv_body<Dec, NT, MODE>(p, smem);
  if (p.trace != nullptr && (threadIdx.x & 31) == 0)
    atomicMax(p.trace + blockIdx.x * 4 + 3, global_timer_ns());
}

}  // namespace gridq::cuda::detail
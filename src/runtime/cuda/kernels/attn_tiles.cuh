// The tile table of attn_tc_kernel (attention_tc.cu): a step's rows cut into runs of consecutive positions of
// one sequence and each run's (row, head) pairs into tiles of a CTA's 16·W pairs, with their item counts.
#pragma once

#include "runtime/cuda/kernels/attention_tc.h"

namespace gridq::cuda::detail {

// The tile table: runs + pair tiles of a slice of T rows (g ≤ 16), in dynamic shared memory after the key
// blocks, sized for the slice class (decode: ≤ kMaxSliceRows rows) so that a decode step's CTAs stay as
// small as the key blocks make them (a table for 256 rows cost a 1-warp CTA its third slot per SM).
__host__ __device__ constexpr int max_tiles(int T) { return 2 * T + 64; }

// A tile: pairs [p0, p0 + np) of the run starting at step row t0 (pair p = (row t0 + p / g, head p % g of
// the KV head's group)); splits [lo, lo + ns) hold keys of its rows; items of the tiles before it: first.
struct Tile {
  int t0, p0, np, lo, ns, first;
};

// The step's tiles (≤ max_tiles(T); the host checks g ≤ 16) and their item counts. Every thread marks the
// rows that start a run (a new sequence, or a position that does not follow the row before) in a bit mask,
// then thread 0 walks the runs: O(T / threads + runs + tiles) instead of a serial scan of the rows (a
// 256-row prefill slice spent ~13 µs of every CTA there). Within a run positions are consecutive, so a
// tile's first and last positions follow from the run's first. Block-collective; the result is in
// *n_tiles / *total after the trailing barrier.
__device__ inline void build_tiles(const AttnArgs& a, int g, int per_tile, bool fused, Tile* tiles,
                                   int* n_tiles, int* total, unsigned* starts) {
  constexpr int kWords = kAttnFusedSliceRows / 32;
  for (int w = threadIdx.x; w < kWords; w += blockDim.x) starts[w] = 0u;
  __syncthreads();
  for (int t = threadIdx.x; t < a.T; t += blockDim.x)
    if (t == 0 || a.rows.seq_slot[t] != a.rows.seq_slot[t - 1] || a.rows.pos[t] != a.rows.pos[t - 1] + 1)
      atomicOr(starts + t / 32, 1u << (t % 32));
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0, items = 0;
    for (int t = 0; t < a.T;) {
      int e = t + 1;  // the next run start after t (or T)
      while (e < a.T) {
        const unsigned rest = starts[e / 32] >> (e % 32);
        if (rest) {
          e += __ffs(rest) - 1;
          break;
        }
        e = (e / 32 + 1) * 32;
      }
      e = min(e, a.T);
      const int pos0 = a.rows.pos[t], pairs = (e - t) * g;
      for (int p0 = 0; p0 < pairs; p0 += per_tile) {
        Tile& x = tiles[n++];
        x.t0 = t, x.p0 = p0, x.np = min(per_tile, pairs - p0);
        const int first_pos = pos0 + p0 / g, last_pos = pos0 + (p0 + x.np - 1) / g;
        x.lo = attn_first_split(a.window, first_pos);
        x.ns = last_pos / kAttnSplitKeys - x.lo + 1;
        x.first = items;
        items += (fused ? 1 : x.ns) * a.nkv;
      }
      t = e;
    }
    *n_tiles = n;
    *total = items;
  }
  __syncthreads();
}

}  // namespace gridq::cuda::detail

// The grouped experts' pair table and items (moe_grouped.cu sorts, moe_grouped.cu / moe_grouped_wide.cu
// walk it). grp layout (ints): [0, E] pair offsets per expert; [E+1, 2E+1] gate_up item offsets;
// [2E+2, 3E+2] down item offsets; [3E+3, 3E+3+P) the pairs in expert order (pair p = t·k + j).
#pragma once

#include <cstdint>

#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {

__device__ __forceinline__ int grp_items_off(int E, bool gate_up) { return gate_up ? E + 1 : 2 * E + 2; }
__device__ __forceinline__ int grp_pairs_off(int E) { return 3 * E + 3; }

// Where an item is: expert e, tile (or tile group) r, pair block b (ioff nondecreasing, ioff[E] = items;
// an expert's items are its pair blocks × R tiles, tile fastest).
struct Item {
  int item, e, r, b;
};
__device__ __forceinline__ bool locate(int item, int n_items, const int* ioff, int E, int R, Item& it) {
  if (item >= n_items) return false;
  int lo = 0, hi = E;  // ioff[lo] <= item < ioff[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (ioff[mid] <= item)
      lo = mid;
    else
      hi = mid;
  }
  const int local = item - ioff[lo];
  it.item = item, it.e = lo, it.b = local / R, it.r = local % R;
  return true;
}

// The launch's item offsets (gate_up or down) and the pair offsets, [E + 1] ints each, into shared memory at
// `at`, once the previous kernels are done (PDL); returns the 16-byte aligned byte after them.
__device__ __forceinline__ uint8_t* stage_offsets(const int* grp, int E, bool gate_up, unsigned char* at,
                                                  int*& ioff, int*& poff) {
  ioff = reinterpret_cast<int*>(at);
  poff = ioff + (E + 1);
  uint8_t* after = reinterpret_cast<uint8_t*>(poff + (E + 1));
  after += (16 - reinterpret_cast<uintptr_t>(after) % 16) % 16;
  pdl_launch_dependents();
  pdl_wait();  // the pairs, the items and the activations are the previous kernels' outputs
  const int* gi = grp + grp_items_off(E, gate_up);
  for (int i = threadIdx.x; i <= E; i += blockDim.x) ioff[i] = __ldcg(gi + i), poff[i] = __ldcg(grp + i);
  __syncthreads();
  return after;
}

}  // namespace gridq::cuda::detail

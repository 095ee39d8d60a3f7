// The grouped experts' pair table and items (moe_grouped.cu sorts, moe_grouped.cu / moe_grouped_wide.cu
// walk it). grp layout (ints): [0, E] pair offsets per expert; [E+1, 2E+1] gate_up item offsets;
// [2E+2, 3E+2] down item offsets; [3E+3, 3E+3+P) the pairs in expert order (pair p = t·k + j).
#pragma once

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

}  // namespace gridq::cuda::detail

// The routed experts' pair sort (kparams.h raw_group_pairs): a step's T·k (token, expert) pairs ordered by
// expert, stable, and the item counts of the grouped kernels (moe_grouped.cu, moe_grouped_wide.cu), in one
// block with no atomics, so the order is a pure function of the expert ids.
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/moe_items.cuh"

namespace gridq::cuda::detail {

namespace {

// Exclusive prefix sum over the block's threads (blockDim.x ≤ 1024, a multiple of 32); ws: 32 ints of shared
// memory. Returns this thread's exclusive sum; *total gets the block total.
__device__ int block_exclusive_scan(int v, int* ws, int* total) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) ws[w] = incl;
  __syncthreads();
  if (w == 0) {
    int t = lane < nw ? ws[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += n;
    }
    ws[lane] = t;  // inclusive warp totals
  }
  __syncthreads();
  const int r = incl - v + (w > 0 ? ws[w - 1] : 0);
  *total = ws[nw - 1];
  __syncthreads();
  return r;
}

// One block of 1024 threads (32 warps), E ≤ 1024. Warp w owns the pairs [w·P/32, (w+1)·P/32): it counts
// them per expert into its own row of a [32][E] histogram (__match_any_sync: lanes with the same expert),
// the rows become each warp's first slot per expert (pair offsets + the earlier warps' counts), and the warp
// places its pairs again in ascending order. The sorted order (by expert, then pair index) is a pure
// function of eid, with no atomics and O(P/32 + E) steps a warp.
__global__ void __launch_bounds__(1024)
    group_pairs_kernel(const int* eid, int P, int E, int nb, int r_gu, int r_dn, int* grp) {
  extern __shared__ int sm[];
  int* ws = sm;                                               // [32] scan scratch
  int* hist = sm + 32;                                        // [32][E] per-warp counts, then first slots
  uint16_t* ev = reinterpret_cast<uint16_t*>(hist + 32 * E);  // [P] expert ids (E ≤ 1024)
  pdl_wait();
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < 32 * E; i += blockDim.x) hist[i] = 0;
  for (int p = threadIdx.x; p < P; p += blockDim.x) ev[p] = static_cast<uint16_t>(eid[p]);
  __syncthreads();
  const int per = (P + 31) / 32, lo = min(P, w * per), hi = min(P, lo + per);
  int* mine = hist + w * E;
  // Pass 1 and 2 walk the warp's pairs 32 at a time; the lowest lane of each equal-expert group updates
  // the warp's row (one writer per expert per round).
  for (int base = lo; base < hi; base += 32) {
    const int p = base + lane;
    const int e = p < hi ? ev[p] : -1 - lane;  // distinct sentinels never match a real expert
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (p < hi && (same & ((1u << lane) - 1)) == 0) mine[e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  const int e = threadIdx.x;
  int c = 0;
  if (e < E)
    for (int v = 0; v < 32; ++v) c += hist[v * E + e];
  const int blocks = (c + nb - 1) / nb;
  int tot_p = 0, tot_gu = 0, tot_dn = 0;
  const int off = block_exclusive_scan(c, ws, &tot_p);
  const int igu = block_exclusive_scan(blocks * r_gu, ws, &tot_gu);
  const int idn = block_exclusive_scan(blocks * r_dn, ws, &tot_dn);
  if (e < E) {
    grp[e] = off, grp[E + 1 + e] = igu, grp[2 * E + 2 + e] = idn;
    int run = off;  // warp v's first slot for expert e: after the pairs of the warps before it
    for (int v = 0; v < 32; ++v) {
      const int n = hist[v * E + e];
      hist[v * E + e] = run;
      run += n;
    }
  }
  if (e == 0) grp[E] = tot_p, grp[2 * E + 1] = tot_gu, grp[3 * E + 2] = tot_dn;
  __syncthreads();
  int* pairs = grp + grp_pairs_off(E);
  for (int base = lo; base < hi; base += 32) {
    const int p = base + lane;
    const int ex = p < hi ? ev[p] : -1 - lane;
    const unsigned same = __match_any_sync(0xffffffffu, ex);
    const unsigned before = same & ((1u << lane) - 1);
    if (p < hi) pairs[mine[ex] + __popc(before)] = p;
    __syncwarp();
    if (p < hi && before == 0) mine[ex] += __popc(same);
    __syncwarp();
  }
}

}  // namespace

cudaError_t raw_group_pairs(const int* eid, int P, int E, int nb, int r_gu, int r_dn, int* grp,
                            cudaStream_t s, bool pdl) {
  const size_t smem = group_pairs_smem_bytes(P, E);
  if (const cudaError_t e = opt_in_smem(group_pairs_kernel, smem); e != cudaSuccess) return e;
  return launch_pdl(pdl, group_pairs_kernel, dim3(1), dim3(1024), smem, s, eid, P, E, nb, r_gu, r_dn, grp);
}

}  // namespace gridq::cuda::detail

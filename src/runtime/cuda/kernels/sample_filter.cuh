// Step 6 of the device sampler (sample.cu): the filters' cut over a row's weights w. The candidates (w ≥
// 2^-40, or past kSampleCandidates of them the whole w-bit buckets from the top that fit) are sorted in the
// host's order and walked as the host walks its sorted row; top-p alone past them bisects over w-bit buckets.
// Included by sample.cu alone.
#pragma once

#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/sample_block.cuh"

namespace gridq::cuda::detail {
namespace {

// (a before b) in the host's filter order: w descending, id ascending.
__device__ bool before(double wa, int ia, double wb, int ib) { return wa > wb || (wa == wb && ia < ib); }

__device__ void bitonic_sort(Shared& sh, int P) {
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += kThreads) {
        const int l = i ^ j;
        if (l <= i) continue;
        const bool up = (i & k) == 0;  // this pair's run is in `before` order
        const bool swap = up ? before(sh.cw[l], sh.ci[l], sh.cw[i], sh.ci[i])
                             : before(sh.cw[i], sh.ci[i], sh.cw[l], sh.ci[l]);
        if (swap) {
          const double tw = sh.cw[i];
          const int ti = sh.ci[i];
          sh.cw[i] = sh.cw[l], sh.ci[i] = sh.ci[l];
          sh.cw[l] = tw, sh.ci[l] = ti;
        }
      }
      __syncthreads();
    }
}

// The ids i with keep(i) (at most kSampleCandidates) gathered into sh.cw / sh.ci in any order, then sorted by
// the host's filter order (a total order: the result does not depend on the gather's order). Returns P,
// the sorted length (a power of two; the slots past the count hold w = -1, id INT_MAX).
template <class Keep>
__device__ int gather_sorted(const double* w, int V, int count, Keep keep, Shared& sh) {
  if (threadIdx.x == 0) sh.n_cand = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int b = 0; b < V; b += kThreads) {
    const int i = b + threadIdx.x;
    const bool is = i < V && keep(i);
    const unsigned m = __ballot_sync(kAll, is);
    int at = 0;
    if (lane == 0 && m) at = atomicAdd(&sh.n_cand, __popc(m));
    at = __shfl_sync(kAll, at, 0);
    if (is) {
      const int pos = at + __popc(m & ((1u << lane) - 1u));
      sh.cw[pos] = w[i], sh.ci[pos] = i;
    }
  }
  __syncthreads();
  int P = 1;
  while (P < count) P <<= 1;
  for (int i = count + threadIdx.x; i < P; i += kThreads) sh.cw[i] = -1.0, sh.ci[i] = INT_MAX;
  __syncthreads();
  bitonic_sort(sh, P);
  return P;
}

// w's IEEE bits: w ≥ 0, so they order as w does.
__device__ unsigned long long wbits(double w) {
  return static_cast<unsigned long long>(__double_as_longlong(w));
}

// More than kSampleCandidates ids have w ≥ kSampleCandidateMin: the candidates become the ids with w at or
// above a higher threshold, the largest set of whole buckets of w's bits that still fits the sort. Three
// passes of a 4,096-bin count histogram over 12-bit digits of the bits (from the top: the exponent, then
// mantissa bits; integer counts, so the same whatever the atomics' order) find the bucket where the count
// from the top passes kSampleCandidates; the threshold is that bucket's upper end. The candidates are still
// a prefix of the host's order (w descending, id ascending): the walk below uses them as before and leaves
// a row whose cut lies past them to the host. Returns the threshold's bits (0 when none fits: one bucket of
// 2^-24 relative width holds more than the sort).
__device__ unsigned long long wide_threshold(const double* w, int V, Shared& sh) {
  int* hist = reinterpret_cast<int*>(sh.cw);  // [4096], before the compaction uses cw
  unsigned long long prefix = 0;
  int above = 0;  // ids in buckets above the current path
  for (int level = 0; level < 3; ++level) {
    const int shift = 52 - 12 * level;
    for (int b = threadIdx.x; b < 4096; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const unsigned long long k = wbits(w[i]);
      if (level == 0 || (k >> (shift + 12)) == prefix) atomicAdd(&hist[(k >> shift) & 4095], 1);
    }
    __syncthreads();
    // Warp 0: lane l sums bins [4096 − 128(l+1), 4096 − 128 l) (the top first), an inclusive scan over the
    // lanes, and the first lane whose running count passes the sort walks its bins down to the crossing.
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x, hi = 4095 - 128 * lane;
      int own = 0;
      for (int b = hi; b > hi - 128; --b) own += hist[b];
      int run = own;
      for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(kAll, run, o);
        if (lane >= o) run += u;
      }
      const unsigned pass = __ballot_sync(kAll, above + run > kSampleCandidates);
      const int first = pass ? __ffs(pass) - 1 : 31;
      if (lane == first) {
        int acc = above + run - own, b = hi;
        while (b > hi - 128 && acc + hist[b] <= kSampleCandidates) acc += hist[b--];
        sh.n_cand = acc, sh.pick_warp = b;  // scratch: the count above the crossing bin, the bin
      }
    }
    __syncthreads();
    above = sh.n_cand;
    prefix = (prefix << 12) | static_cast<unsigned long long>(sh.pick_warp);
    __syncthreads();
  }
  // The crossing bucket's upper end: every id with bits at or above it is a candidate (`above` of them).
  return above > 0 ? (prefix + 1) << 28 : 0;  // the prefix holds bits [28, 64) after three digits
}

// Top-p alone whose cut lies past the candidates (a flat row): the bucket of w's bits [28, 64) where the sum
// from the top first reaches `target`, by bisection over the buckets (each probe a fixed-order block sum, so
// the cut is the same run to run and whatever else is in the launch), then that bucket's ids sorted and
// walked on from the sum above it, as the host walks its sorted row. The sums above the bucket are a tree's,
// not the host's sequential ones: the cut may differ by ulps of the target (sampler.h's tolerance). Sets
// sh.status 1 (the host) when the bucket holds more ids than the sort.
__device__ void top_p_wide(const double* w, int V, double target, Shared& sh) {
  auto sum_from = [&](unsigned long long b) {  // Σ w over the buckets ≥ b
    double s = 0.0;
    for (int i = threadIdx.x; i < V; i += kThreads)
      if ((wbits(w[i]) >> 28) >= b) s += w[i];
    return block_sum_f64<kThreads>(s, sh.red);
  };
  // sum_from(lo) ≥ target > sum_from(hi); w ≤ 1 puts every bucket below 0x3FF000001.
  unsigned long long lo = 0, hi = 0x3FF000001ULL;
  double above = 0.0;  // sum_from(hi)
  while (hi - lo > 1) {
    const unsigned long long mid = lo + (hi - lo) / 2;
    const double f = sum_from(mid);
    if (f >= target)
      lo = mid;
    else
      hi = mid, above = f;
  }
  int c = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) c += (wbits(w[i]) >> 28) == lo;
  c = block_sum_int(c, sh);
  if (c > kSampleCandidates || c == 0) {
    if (threadIdx.x == 0) sh.status = 1;
    __syncthreads();
    return;
  }
  gather_sorted(
      w, V, c, [&](int i) { return (wbits(w[i]) >> 28) == lo; }, sh);
  if (threadIdx.x == 0) {
    double acc = above;
    int k = 0;
    while (k < c - 1) {  // the bucket's last id when rounding keeps acc under the target
      acc += sh.cw[k];
      if (acc >= target) break;
      ++k;
    }
    sh.w_cut = sh.cw[k], sh.id_cut = sh.ci[k], sh.status = 0;
  }
  __syncthreads();
}

// Step 6's filters on w[0..V): the kept set as a cut (w > w_cut, or w == w_cut and id <= id_cut) into
// sh.w_cut / sh.id_cut, or sh.status = 1 when the cut may lie beyond the candidates.
__device__ void filter_cut(const double* w, int V, const SampleRowArgs& a, Shared& sh) {
  const bool top_k = a.top_k > 0 && a.top_k < V, top_p = a.top_p<1.0, min_p = a.min_p> 0.0;
  if (!top_k && !top_p && !min_p) return;  // everything kept (w_cut = -1)
  // The candidates' count and the tail's sum below their threshold, in one pass.
  double cmin = kSampleCandidateMin, tail = 0.0;
  int c = 0;
  auto split_at = [&](double t) {
    c = 0, tail = 0.0;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      if (w[i] >= t)
        ++c;
      else
        tail += w[i];
    }
    c = block_sum_int(c, sh);
    tail = block_sum_f64<kThreads>(tail, sh.red);
  };
  split_at(cmin);
  if (c > kSampleCandidates) {
    const unsigned long long t = wide_threshold(w, V, sh);
    if (t == 0) {
      if (threadIdx.x == 0) sh.status = 1;
      __syncthreads();
      return;
    }
    cmin = __longlong_as_double(static_cast<long long>(t));
    split_at(cmin);
  }
  gather_sorted(
      w, V, c, [&](int i) { return w[i] >= cmin; }, sh);
  if (threadIdx.x == 0) {  // the host's sequential walk over the sorted prefix
    long long n = top_k ? a.top_k : V;
    int st = top_k && a.top_k > c ? 1 : 0;
    if (!st && top_p) {
      const int lim = static_cast<int>(n < c ? n : c);
      double kept = 0.0;
      for (int j = 0; j < lim; ++j) kept += sh.cw[j];
      if (n > c) kept += tail;
      const double target = a.top_p * kept;
      double acc = 0.0;
      int k = 0;
      while (k < lim) {
        acc += sh.cw[k++];
        if (acc >= target) break;
      }
      if (acc < target && n > c) {
        st = top_k || min_p ? 1 : 3;  // 3: top-p alone, cut past the candidates (top_p_wide)
        sh.p_target = target;
      }
      n = k > 1 ? k : 1;
    }
    if (!st && min_p) {
      const double thr = a.min_p * sh.cw[0];
      const int lim = static_cast<int>(n < c ? n : c);
      int k = 0;
      while (k < lim && sh.cw[k] >= thr) ++k;
      if (k == lim && n > c) st = 1;
      n = k > 1 ? k : 1;
    }
    if (!st && n > c) st = 1;
    sh.status = st;
    if (!st) sh.w_cut = sh.cw[n - 1], sh.id_cut = sh.ci[n - 1];
  }
  __syncthreads();
  if (sh.status == 3) top_p_wide(w, V, sh.p_target, sh);
}

}  // namespace
}  // namespace gridq::cuda::detail

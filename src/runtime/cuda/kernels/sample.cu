// The runtime sampler on the device (runtime/sampler.h steps 1-8 for one row per block of 1024 threads).
// Every sum runs in a fixed order (thread-strided partials and a fixed tree, or per-warp chunks scanned in
// lane order), so a row's token is the same run to run and whatever else is in the launch; the orders differ
// from the host's sequential sums, which moves p by a few ulps (the tolerance sampler.h states). Filters sort
// only the candidates (w >= 2^-40, at most kSampleCandidates) by (w descending, id ascending), the host's
// order, and walk them sequentially as the host does; a row whose cut could fall outside them goes back to
// the host (status 1).
#include <climits>

#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/sample_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct Shared {
  double red[kThreads];
  double cw[kSampleCandidates];  // candidates' w, then sorted
  int ci[kSampleCandidates];     // their ids
  double warp_tot[kWarps], base[kWarps + 1];
  int warp_last[kWarps];
  double dv[kWarps];
  int iv[kWarps];
  int n_cand, status, token, id_cut, pick_warp;
  double w_cut;
};

__device__ double block_max(double v, Shared& sh) {
  for (int o = 16; o; o >>= 1) v = fmax(v, __shfl_xor_sync(kAll, v, o));
  if ((threadIdx.x & 31) == 0) sh.dv[threadIdx.x >> 5] = v;
  __syncthreads();
  double r = sh.dv[0];
  for (int w = 1; w < kWarps; ++w) r = fmax(r, sh.dv[w]);
  __syncthreads();
  return r;
}

__device__ int block_sum_int(int v, Shared& sh) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  if ((threadIdx.x & 31) == 0) sh.iv[threadIdx.x >> 5] = v;
  __syncthreads();
  int r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.iv[w];
  __syncthreads();
  return r;
}

// Lowest index of the largest s[0..V) (the host's strict-greater scan).
__device__ int block_argmax(const double* s, int V, Shared& sh) {
  double best = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (s[i] > best || (s[i] == best && i < bi)) best = s[i], bi = i;
  for (int o = 16; o; o >>= 1) {
    const double ob = __shfl_xor_sync(kAll, best, o);
    const int oi = __shfl_xor_sync(kAll, bi, o);
    if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
  }
  if ((threadIdx.x & 31) == 0) sh.dv[threadIdx.x >> 5] = best, sh.iv[threadIdx.x >> 5] = bi;
  __syncthreads();
  double b = sh.dv[0];
  int r = sh.iv[0];
  for (int w = 1; w < kWarps; ++w)
    if (sh.dv[w] > b || (sh.dv[w] == b && sh.iv[w] < r)) b = sh.dv[w], r = sh.iv[w];
  __syncthreads();
  return r;
}

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

// Step 6's filters on w[0..V): the kept set as a cut (w > w_cut, or w == w_cut and id <= id_cut) into
// sh.w_cut / sh.id_cut, or sh.status = 1 when the cut may lie beyond the candidates.
__device__ void filter_cut(const double* w, int V, const SampleRowArgs& a, Shared& sh) {
  const bool top_k = a.top_k > 0 && a.top_k < V, top_p = a.top_p<1.0, min_p = a.min_p> 0.0;
  if (!top_k && !top_p && !min_p) return;  // everything kept (w_cut = -1)
  int c = 0;
  double tail = 0.0;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    if (w[i] >= kSampleCandidateMin)
      ++c;
    else
      tail += w[i];
  }
  c = block_sum_int(c, sh);
  tail = block_sum_f64<kThreads>(tail, sh.red);
  if (c > kSampleCandidates) {
    if (threadIdx.x == 0) sh.status = 1;
    __syncthreads();
    return;
  }
  // Compaction (any order: the sort below is by a total order).
  if (threadIdx.x == 0) sh.n_cand = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int b = 0; b < V; b += kThreads) {
    const int i = b + threadIdx.x;
    const bool is = i < V && w[i] >= kSampleCandidateMin;
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
  while (P < c) P <<= 1;
  for (int i = c + threadIdx.x; i < P; i += kThreads) sh.cw[i] = -1.0, sh.ci[i] = INT_MAX;
  __syncthreads();
  bitonic_sort(sh, P);
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
      if (acc < target && n > c) st = 1;
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
}

__device__ bool kept(const double* w, int i, const Shared& sh) {
  return w[i] > sh.w_cut || (w[i] == sh.w_cut && i <= sh.id_cut);
}

__device__ double warp_incl_scan(double v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const double u = __shfl_up_sync(kAll, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Step 7 over the kept w in id order: the lowest id whose running sum exceeds u·W. Warp j owns ids
// [j·chunk, (j+1)·chunk) and scans them 32 at a time; W and the warps' bases are summed by thread 0 in warp
// order. Rounding past every partial sum picks the highest kept id with w > 0 (the host's rule).
__device__ int pick(const double* w, int V, double u, Shared& sh) {
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  const int chunk = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int beg = wi * chunk, end = min(V, beg + chunk);
  double run = 0.0;
  int last = -1;
  for (int g = beg; g < end; g += 32) {
    const int i = g + lane;
    const bool k = i < end && kept(w, i, sh) && w[i] > 0.0;
    const double inc = warp_incl_scan(k ? w[i] : 0.0, lane);
    run += __shfl_sync(kAll, inc, 31);
    const unsigned m = __ballot_sync(kAll, k);
    if (m) last = g + 31 - __clz(m);
  }
  if (lane == 0) sh.warp_tot[wi] = run, sh.warp_last[wi] = last;
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.base[0] = 0.0;
    int hi = -1;
    for (int j = 0; j < kWarps; ++j) {
      sh.base[j + 1] = sh.base[j] + sh.warp_tot[j];
      if (sh.warp_last[j] >= 0) hi = sh.warp_last[j];
    }
    const double target = u * sh.base[kWarps];
    sh.pick_warp = -1;
    for (int j = 0; j < kWarps; ++j)
      if (target < sh.base[j + 1]) {
        sh.pick_warp = j;
        break;
      }
    sh.token = hi >= 0 ? hi : 0;
  }
  __syncthreads();
  if (wi == sh.pick_warp) {
    const double t = u * sh.base[kWarps] - sh.base[wi];
    run = 0.0;
    int found = -1;
    for (int g = beg; g < end && found < 0; g += 32) {
      const int i = g + lane;
      const bool k = i < end && kept(w, i, sh) && w[i] > 0.0;
      const double inc = warp_incl_scan(k ? w[i] : 0.0, lane);
      const unsigned hit = __ballot_sync(kAll, k && t < run + inc);
      if (hit) found = g + __ffs(hit) - 1;
      run += __shfl_sync(kAll, inc, 31);
    }
    if (lane == 0) sh.token = found >= 0 ? found : sh.warp_last[wi];
  }
  __syncthreads();
  return sh.token;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, long long ld, int V, const SampleRowArgs* rows,
                  const SampleEdit* edits, double* scratch, SampleResult* out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  const SampleRowArgs a = rows[blockIdx.x];
  if (plain_greedy(a)) return;  // sample_greedy.cu's kernel takes it
  const float* x = logits + static_cast<long long>(a.row) * ld;
  double* s = scratch + static_cast<long long>(blockIdx.x) * V;
  // Step 8's log-sum-exp of the raw logits; a non-finite logit fails the row (never sampled from).
  double mx = -INFINITY;
  int bad = 0, finite = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = x[i];
    bad |= isnan(v) || v == INFINITY;  // -inf only rules a token out (runtime::nonfinite_logits)
    finite |= isfinite(v);
    mx = fmax(mx, static_cast<double>(v));
  }
  if (__syncthreads_or(bad) || !__syncthreads_or(finite)) {
    if (threadIdx.x == 0) out[blockIdx.x] = SampleResult{-1, 2, 0.0f, 0};
    return;
  }
  mx = block_max(mx, sh);
  double se = 0.0;
  for (int i = threadIdx.x; i < V; i += kThreads) se += exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + log(block_sum_f64<kThreads>(se, sh.red));
  // Steps 1-4: scores, then the edits (distinct ids: no two threads touch one score).
  for (int i = threadIdx.x; i < V; i += kThreads) s[i] = static_cast<double>(x[i]);
  __syncthreads();
  for (int e = a.edit_begin + static_cast<int>(threadIdx.x); e < a.edit_end; e += kThreads) {
    const SampleEdit ed = edits[e];
    double v = s[ed.id];
    if (ed.flags & 1) v = v > 0.0 ? v / a.repetition : v * a.repetition;
    v -= ed.sub;
    v += ed.bias;
    if (ed.flags & 2) v = -INFINITY;
    s[ed.id] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) sh.status = 0, sh.w_cut = -1.0, sh.id_cut = INT_MAX;
  __syncthreads();
  int token = 0;
  if (a.greedy) {
    token = block_argmax(s, V, sh);  // step 5
  } else {
    double m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += kThreads) m = fmax(m, s[i]);
    m = block_max(m, sh);
    if (m > -INFINITY) {  // else everything is banned: token 0
      for (int i = threadIdx.x; i < V; i += kThreads) s[i] = exp((s[i] - m) / a.temperature);
      __syncthreads();
      filter_cut(s, V, a, sh);
      if (sh.status != 0) {
        if (threadIdx.x == 0) out[blockIdx.x] = SampleResult{-1, sh.status, 0.0f, 0};
        return;
      }
      token = pick(s, V, a.u, sh);
    }
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] = SampleResult{token, 0, static_cast<float>(static_cast<double>(x[token]) - lse), 0};
}

}  // namespace

cudaError_t raw_sample_rows(const float* logits, long long ld, int V, const SampleRowArgs* rows, int R,
                            const SampleEdit* edits, double* scratch, void* greedy_scratch, SampleResult* out,
                            unsigned kinds, cudaStream_t s) {
  if (R <= 0) return cudaSuccess;
  // Both kernels see every row and take their own kind (the rows are on the device).
  if (kinds & kSamplePlainGreedy)
    if (const cudaError_t e = launch_greedy_rows(logits, ld, V, rows, R, greedy_scratch, out, s);
        e != cudaSuccess)
      return e;
  if (!(kinds & kSampleOther)) return cudaSuccess;
  static const cudaError_t attr = cudaFuncSetAttribute(
      sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(Shared)));
  if (attr != cudaSuccess) return attr;
  sample_kernel<<<R, kThreads, sizeof(Shared), s>>>(logits, ld, V, rows, edits, scratch, out);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

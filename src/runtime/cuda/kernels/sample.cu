// The runtime sampler on the device (runtime/sampler.h steps 1-8 for one row per block of 1024 threads).
// Every sum runs in a fixed order (thread-strided partials and a fixed tree, or per-warp chunks scanned in
// lane order), so a row's token is the same run to run and whatever else is in the launch; the orders differ
// from the host's sequential sums, which moves p by a few ulps (the tolerance sampler.h states). The filters'
// cut is sample_filter.cuh's; a row whose cut it cannot place goes back to the host (status 1). Greedy rows
// without edits are sample_greedy.cu's.
#include <climits>

#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/sample_block.cuh"
#include "runtime/cuda/kernels/sample_filter.cuh"
#include "runtime/cuda/kernels/sample_kernels.h"

namespace gridq::cuda::detail {
namespace {

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
  if (plain_chunked(a)) return;  // sample_greedy.cu's kernel takes it
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
  if (kinds & kSampleChunked)
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

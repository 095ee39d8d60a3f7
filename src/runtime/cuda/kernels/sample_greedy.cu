// Rows without score edits that are greedy, or sampled at a temperature with no filter (runtime/sampler.h
// steps 5-7 on the raw logits, and step 8's log-sum-exp for the logprob): the most common decode rows, given
// their own kernel because sample.cu's one block per row walks a 100k-150k vocabulary five times or more on
// one SM (≈ 110 µs a step, whatever the batch). Here a row is cut into kGreedyChunks fixed chunks (the cut
// depends on V alone), one block each: a chunk's max, its lowest arg max, its FP64 sum of exp(x - chunk max)
// and, at a temperature T, of exp((x - chunk max) / T); the row's last block to finish (a counter per row,
// reset by that block) folds the chunks in chunk order. Greedy: the token is the lowest index of the row's
// largest logit, as the host's strict-greater scan finds it. At a temperature: W = the chunks' sums scaled to
// the row's max, in chunk order; the chunk whose running sum first exceeds u·W is walked in id order (a
// fixed-order block scan of w = exp((x - max) / T)) for the lowest id whose running sum exceeds it, the
// host's inverse CDF (step 7). Where rounding leaves u·W past every sum the row goes to the host (status 1),
// which applies its highest-id rule. The orders are fixed, so a row's token and logprob are the same run to
// run and whatever else is in the launch (they differ from the host's sequential sums by FP64 rounding: the
// tolerance sampler.h states).
#include <climits>

#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/sample_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct Part {   // one chunk of one row
  double sum;   // Σ exp(x - max) over the chunk (0 when max is -inf)
  double wsum;  // Σ exp((x - max) / T) at a temperature (0 when greedy or max is -inf)
  float max;    // the chunk's largest logit (-inf: none finite or larger)
  int arg;      // its lowest index (INT_MAX: none)
  int flags;    // 1: a NaN or +inf logit, 2: some finite logit
  int pad;
};
static_assert(sizeof(Part) == 32 && kGreedyRowBytes == 8 + sizeof(Part) * kGreedyChunks, "a row's region");

// Launch row r's region of the scratch: its counter (zeroed once, reset by the row's last block), then its
// chunks' parts.
__device__ unsigned char* region(void* scratch, unsigned r) {
  return static_cast<unsigned char*>(scratch) + kGreedyRowBytes * r;
}

struct Fold {                // the last block's view of its row, in shared memory
  double lse, target, base;  // step 8's log-sum-exp; u·W; the running sum before the crossing chunk
  int token, status, chunk;  // chunk: the crossing one (-1: none, the host's rule)
  int found;                 // the walk's lowest crossing id (INT_MAX: none)
};

// Step 7 inside chunk c of the row (ids [beg, end)): thread t sums w over its run of consecutive ids, the
// runs' sums are scanned in thread order, and each thread walks its run from its base; the lowest id whose
// running sum exceeds the target wins.
__device__ void walk_chunk(const float* x, int beg, int end, double M, double T, double* red, Fold& f) {
  const int per = (end - beg + kThreads - 1) / kThreads;
  const int b = min(end, beg + per * static_cast<int>(threadIdx.x)), e = min(end, b + per);
  double local = 0.0;
  for (int i = b; i < e; ++i) local += exp((static_cast<double>(x[i]) - M) / T);
  red[threadIdx.x] = local;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive scan in thread order
    double run = f.base;
    for (int t = 0; t < kThreads; ++t) {
      const double v = red[t];
      red[t] = run;
      run += v;
    }
  }
  __syncthreads();
  double run = red[threadIdx.x];
  for (int i = b; i < e; ++i) {
    run += exp((static_cast<double>(x[i]) - M) / T);
    if (f.target < run) {
      atomicMin(&f.found, i);
      break;
    }
  }
  __syncthreads();
}

// grid (kGreedyChunks, R): block (c, r) reduces chunk c of rows[r] when that row is plain_chunked's.
__global__ void __launch_bounds__(kThreads)
    greedy_kernel(const float* logits, long long ld, int V, const SampleRowArgs* rows, void* scratch,
                  SampleResult* out) {
  const SampleRowArgs a = rows[blockIdx.y];
  if (!plain_chunked(a)) return;  // sample.cu's kernel takes it
  const bool temp = a.greedy == 0;
  __shared__ double red[kThreads];
  __shared__ float wmax[kWarps];
  __shared__ int warg[kWarps], wflags[kWarps];
  __shared__ bool last;
  __shared__ Fold f;
  const float* x = logits + static_cast<long long>(a.row) * ld;
  const int len = greedy_chunk_len(V), beg = static_cast<int>(blockIdx.x) * len;
  const int end = min(V, beg + len);
  float m = -INFINITY;
  int arg = INT_MAX, flags = 0;
  for (int i = beg + static_cast<int>(threadIdx.x); i < end; i += kThreads) {
    const float v = x[i];
    flags |= (isnan(v) || v == INFINITY ? 1 : 0) | (isfinite(v) ? 2 : 0);
    if (v > m) m = v, arg = i;  // ascending i: the first of equal values stays
  }
  for (int o = 16; o; o >>= 1) {
    const float om = __shfl_xor_sync(kAll, m, o);
    const int oa = __shfl_xor_sync(kAll, arg, o);
    if (om > m || (om == m && oa < arg)) m = om, arg = oa;
    flags |= __shfl_xor_sync(kAll, flags, o);
  }
  if ((threadIdx.x & 31) == 0)
    wmax[threadIdx.x >> 5] = m, warg[threadIdx.x >> 5] = arg, wflags[threadIdx.x >> 5] = flags;
  __syncthreads();
  m = wmax[0], arg = warg[0], flags = wflags[0];
  for (int w = 1; w < kWarps; ++w) {
    if (wmax[w] > m || (wmax[w] == m && warg[w] < arg)) m = wmax[w], arg = warg[w];
    flags |= wflags[w];
  }
  double se = 0.0, sw = 0.0;
  if (m > -INFINITY)
    for (int i = beg + static_cast<int>(threadIdx.x); i < end; i += kThreads) {
      const double d = static_cast<double>(x[i]) - static_cast<double>(m);
      se += exp(d);
      if (temp) sw += exp(d / a.temperature);
    }
  se = block_sum_f64<kThreads>(se, red);
  if (temp) sw = block_sum_f64<kThreads>(sw, red);
  unsigned char* const reg = region(scratch, blockIdx.y);
  unsigned* const count = reinterpret_cast<unsigned*>(reg);
  Part* const P = reinterpret_cast<Part*>(reg + 8);
  if (threadIdx.x == 0) {
    P[blockIdx.x] = Part{m > -INFINITY ? se : 0.0, m > -INFINITY ? sw : 0.0, m, arg, flags, 0};
    __threadfence();  // the part is visible before the count says so
    last = atomicAdd(count, 1u) == kGreedyChunks - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) {
    *count = 0;  // for the next launch: the row's other blocks have all counted
    // The fold in chunk order: the first chunk holding the row's max gives the greedy token (its lowest
    // index).
    float M = -INFINITY;
    int tok = INT_MAX, fl = 0;
    for (int c = 0; c < kGreedyChunks; ++c) {
      const float cm = __ldcg(&P[c].max);
      fl |= __ldcg(&P[c].flags);
      if (cm > M) M = cm, tok = __ldcg(&P[c].arg);
    }
    f.status = (fl & 1) || !(fl & 2) ? 2 : 0;  // NaN / +inf, or nothing finite: the host names the row
    double sum = 0.0, W = 0.0;
    for (int c = 0; c < kGreedyChunks && f.status == 0; ++c) {
      const float cm = __ldcg(&P[c].max);
      red[c] = 0.0;  // the chunk's w sum scaled to the row's max (red is free: the block sums are done)
      if (cm > -INFINITY) {
        const double d = static_cast<double>(cm) - static_cast<double>(M);
        sum += __ldcg(&P[c].sum) * exp(d);
        if (temp) red[c] = __ldcg(&P[c].wsum) * exp(d / a.temperature), W += red[c];
      }
    }
    f.lse = static_cast<double>(M) + log(sum);
    f.token = tok, f.chunk = -1, f.found = INT_MAX, f.base = 0.0, f.target = a.u * W;
    for (int c = 0; temp && f.status == 0 && c < kGreedyChunks; ++c) {  // the crossing chunk
      if (f.target < f.base + red[c]) {
        f.chunk = c;
        break;
      }
      f.base += red[c];
    }
    if (temp && f.status == 0 && f.chunk < 0) f.status = 1;  // u·W past every sum: the host's rule
    wmax[0] = M;
  }
  __syncthreads();
  if (temp && f.status == 0) {
    const int cb = f.chunk * len;
    walk_chunk(x, cb, min(V, cb + len), static_cast<double>(wmax[0]), a.temperature, red, f);
    if (threadIdx.x == 0) {
      if (f.found == INT_MAX) f.status = 1;  // the walk's sums stopped short of the chunk's: the host
      f.token = f.found;
    }
  }
  if (threadIdx.x != 0) return;
  if (f.status != 0) {
    out[blockIdx.y] = SampleResult{-1, f.status, 0.0f, 0};
    return;
  }
  out[blockIdx.y] = SampleResult{f.token, 0, static_cast<float>(static_cast<double>(x[f.token]) - f.lse), 0};
}

}  // namespace

cudaError_t launch_greedy_rows(const float* logits, long long ld, int V, const SampleRowArgs* rows, int R,
                               void* greedy_scratch, SampleResult* out, cudaStream_t s) {
  if (R <= 0) return cudaSuccess;
  greedy_kernel<<<dim3(kGreedyChunks, static_cast<unsigned>(R)), kThreads, 0, s>>>(logits, ld, V, rows,
                                                                                   greedy_scratch, out);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

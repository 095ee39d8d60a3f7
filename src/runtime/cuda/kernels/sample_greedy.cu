// Greedy rows without score edits (runtime/sampler.h step 5 on the raw logits, and step 8's log-sum-exp for
// the logprob): the most common decode row, given its own kernel because sample.cu's one block per row walks
// a 100k-150k vocabulary five times on one SM (≈ 110 µs a step, whatever the batch). Here a row is cut into
// kGreedyChunks fixed chunks (the cut depends on V alone), one block each: a chunk's max, its lowest arg max
// and its FP64 sum of exp(x - chunk max); the row's last block to finish (a counter per row, reset by that
// block) folds the chunks in chunk order. The token is the lowest index of the row's largest logit, as the
// host's strict-greater scan finds it; the fold's order is fixed, so a row's logprob is the same run to run
// and whatever else is in the launch (it differs from the one-block sum by FP64 rounding: the host
// tolerance).
#include <climits>

#include "runtime/cuda/kernels/block_sum.cuh"
#include "runtime/cuda/kernels/sample_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

struct Part {  // one chunk of one row
  double sum;  // Σ exp(x - max) over the chunk (0 when max is -inf)
  float max;   // the chunk's largest logit (-inf: none finite or larger)
  int arg;     // its lowest index (INT_MAX: none)
  int flags;   // 1: a NaN or +inf logit, 2: some finite logit
  int pad;
};
static_assert(sizeof(Part) == 24 && kGreedyRowBytes == 8 + sizeof(Part) * kGreedyChunks, "a row's region");

// Launch row r's region of the scratch: its counter (zeroed once, reset by the row's last block), then its
// chunks' parts.
__device__ unsigned char* region(void* scratch, unsigned r) {
  return static_cast<unsigned char*>(scratch) + kGreedyRowBytes * r;
}

// grid (kGreedyChunks, R): block (c, r) reduces chunk c of rows[r] when that row is a plain greedy row.
__global__ void __launch_bounds__(kThreads)
    greedy_kernel(const float* logits, long long ld, int V, const SampleRowArgs* rows, void* scratch,
                  SampleResult* out) {
  const SampleRowArgs a = rows[blockIdx.y];
  if (!plain_greedy(a)) return;  // sample.cu's kernel takes it
  __shared__ double red[kThreads];
  __shared__ float wmax[kWarps];
  __shared__ int warg[kWarps], wflags[kWarps];
  __shared__ bool last;
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
  double se = 0.0;
  if (m > -INFINITY)
    for (int i = beg + static_cast<int>(threadIdx.x); i < end; i += kThreads)
      se += exp(static_cast<double>(x[i]) - static_cast<double>(m));
  se = block_sum_f64<kThreads>(se, red);
  unsigned char* const reg = region(scratch, blockIdx.y);
  unsigned* const count = reinterpret_cast<unsigned*>(reg);
  Part* const P = reinterpret_cast<Part*>(reg + 8);
  if (threadIdx.x == 0) {
    P[blockIdx.x] = Part{m > -INFINITY ? se : 0.0, m, arg, flags, 0};
    __threadfence();  // the part is visible before the count says so
    last = atomicAdd(count, 1u) == kGreedyChunks - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  // For the next launch: the row's other blocks have all counted.
  *count = 0;
  // The fold in chunk order: the first chunk holding the row's max gives the token (its lowest index).
  float M = -INFINITY;
  int tok = INT_MAX, fl = 0;
  for (int c = 0; c < kGreedyChunks; ++c) {
    const float cm = __ldcg(&P[c].max);
    fl |= __ldcg(&P[c].flags);
    if (cm > M) M = cm, tok = __ldcg(&P[c].arg);
  }
  if ((fl & 1) || !(fl & 2)) {  // NaN / +inf, or nothing finite: the host names the row (status 2)
    out[blockIdx.y] = SampleResult{-1, 2, 0.0f, 0};
    return;
  }
  double sum = 0.0;
  for (int c = 0; c < kGreedyChunks; ++c) {
    const float cm = __ldcg(&P[c].max);
    if (cm > -INFINITY) sum += __ldcg(&P[c].sum) * exp(static_cast<double>(cm) - static_cast<double>(M));
  }
  const double lse = static_cast<double>(M) + log(sum);
  out[blockIdx.y] = SampleResult{tok, 0, static_cast<float>(static_cast<double>(x[tok]) - lse), 0};
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

// The runtime sampler (runtime/sampler.h, steps 1-8) on the device: one block per logits row, so a row's
// token never depends on the other rows. Plain data and cudaError_t only (gpu-engine.md §1); the host side
// (plans, the host rows, messages) is cuda/sampling.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gridq::cuda::detail {

// Candidates of the filters (top-k / top-p / min-p) are the ids with w = exp((s - max) / T) >= 2^-40; at most
// kSampleCandidates of them are sorted on the device. A row with more takes the whole buckets of w's bits
// from the top that fit the sort (sample_filter.cuh), and top-p alone whose cut lies past them is found by
// bisection over those buckets. A row whose kept set could still reach past what the device sorted (top_k
// above the sorted count, a min-p cut beyond them, a crossing bucket of more than kSampleCandidates ids) is
// left to the host (status 1), which runs the same algorithm on the downloaded row.
inline constexpr int kSampleCandidates = 4096;
inline constexpr double kSampleCandidateMin = 0x1.0p-40;

struct SampleEdit {  // runtime::ScoreEdit
  int id = 0;
  int flags = 0;  // 1: repetition penalty, 2: banned
  double sub = 0.0, bias = 0.0;
};

struct SampleRowArgs {  // runtime::SamplePlan of one row
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition = 1.0, u = 0.0;
  int top_k = 0, greedy = 1;
  int edit_begin = 0, edit_end = 0;  // into the step's edits
  int row = 0;                       // logits row
};

struct SampleResult {
  int token = -1;
  int status = 0;  // 0 sampled, 1 left to the host, 2 NaN / +inf logits (or none finite) in the row
  float logprob = 0.0f;
  int pad = 0;
};

// A row without score edits that is greedy, or sampled at a temperature with no filter (top_k, top_p, min_p
// off: OpenAI's defaults), is sampled by sample_greedy.cu's kernel: the row cut into kGreedyChunks chunks (of
// greedy_chunk_len(V) ids, a multiple of 32), a block each, folded in chunk order. Its scratch
// (greedy_scratch_bytes(R), zeroed once at allocation and left zeroed by every launch) holds one region of
// kGreedyRowBytes per row of a launch: the row's counter, then its chunks' parts. The region of launch row r
// is the same whatever R is, so launches of different sizes never see each other's parts as counters.
inline constexpr int kGreedyChunks = 32;
inline constexpr size_t kGreedyRowBytes = 8 + 32 * kGreedyChunks;
__host__ __device__ inline bool plain_greedy(const SampleRowArgs& a) {
  return a.greedy != 0 && a.edit_begin == a.edit_end;
}
__host__ __device__ inline bool plain_chunked(const SampleRowArgs& a) {
  return plain_greedy(a) || (a.edit_begin == a.edit_end && a.top_k <= 0 && a.top_p >= 1.0 && a.min_p <= 0.0 &&
                             a.temperature > 0.0);
}
__host__ __device__ inline int greedy_chunk_len(int V) {
  return (V + kGreedyChunks * 32 - 1) / (kGreedyChunks * 32) * 32;
}
inline size_t greedy_scratch_bytes(size_t R) { return kGreedyRowBytes * R; }

// rows [R] of logits FP32 [*, ld] (V valid columns); scratch FP64 [R, V]; greedy_scratch as above; out [R].
// Rows plain_chunked takes go to launch_greedy_rows (sample_greedy.cu), the others to sample.cu's kernel;
// `kinds` says which kernels the rows need (kSampleChunked | kSampleOther; the host knows its rows), so a
// batch of one kind launches one kernel. A kind left out of `kinds` leaves its rows' results unwritten.
inline constexpr unsigned kSampleChunked = 1, kSampleOther = 2;
cudaError_t raw_sample_rows(const float* logits, long long ld, int V, const SampleRowArgs* rows, int R,
                            const SampleEdit* edits, double* scratch, void* greedy_scratch, SampleResult* out,
                            unsigned kinds, cudaStream_t s);
cudaError_t launch_greedy_rows(const float* logits, long long ld, int V, const SampleRowArgs* rows, int R,
                               void* greedy_scratch, SampleResult* out, cudaStream_t s);

}  // namespace gridq::cuda::detail

// CPU matrix products for every weight format. Bound: weight bandwidth at decode (each weight row is
// read once per call, whatever the number of tokens, straight from the packed weights), FLOPs at prefill.
// Output rows are split across the worker pool (thread_pool.h), several matrices in one parallel op.
//
// Batch invariance: the value of y[t, r] depends only on x[t, :] and row r, never on which other tokens
// or matrices share the call nor on which thread computes it (every path sums in the reference order of
// dot_kernels.h), so batch-1 and batch-4 decodes, and 1 and 2 threads, produce identical bits.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/qmatrix.h"

namespace gridq::runtime::cpu {

// y[t, r] = sum_c W[r, c] * xq[t, c] for t < T, with xq = x after the matrix's activation contract
// (act_bits 8: FP8 per-token QDQ, 4: FP4 group-16 QDQ, 16: none). x [T, W.cols], y [T, W.rows], fp32.
// FP8 W8A8 follows format.md §12: y = bf16_rn(s_tok · weight_scale[r] · Σ q_x q_w).
void matmul(const QMatrix& w, const float* x, int64_t T, float* y);

// One product of a batch of them.
struct MatJob {
  const QMatrix* w = nullptr;
  const float* x = nullptr;  // [T, w->cols]
  int64_t T = 0;
  float* y = nullptr;  // [T, w->rows]; the jobs' outputs do not overlap
};
// Every job's matmul, as one parallel op (q/k/v/g of a layer; gate/up of all the experts a step routes
// to): one wake-up of the pool instead of one per matrix. Jobs with the same x, T and activation contract
// share one quantized copy of x.
void matmul_jobs(std::span<const MatJob> jobs);

}  // namespace gridq::runtime::cpu

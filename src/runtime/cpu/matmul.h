// CPU matrix products for every weight format. Bound: weight bandwidth at decode (each weight row is
// read once per call, whatever the number of tokens), FLOPs at prefill. OpenMP splits output rows.
//
// Batch invariance: the value of y[t, r] depends only on x[t, :] and row r, never on which other tokens
// share the call, so batch-1 and batch-4 decodes produce identical bits.
#pragma once

#include <cstdint>

#include "runtime/qmatrix.h"

namespace gridq::runtime::cpu {

// y[t, r] = sum_c W[r, c] * xq[t, c] for t < T, with xq = x after the matrix's activation contract
// (act_bits 8: FP8 per-token QDQ, 4: FP4 group-16 QDQ, 16: none). x [T, W.cols], y [T, W.rows], fp32.
// FP8 W8A8 follows format.md §12: y = bf16_rn(s_tok · weight_scale[r] · Σ q_x q_w).
void matmul(const QMatrix& w, const float* x, int64_t T, float* y);

// Fp32 dot product with a fixed summation order (16 lanes, then a fixed tree).
float dot(const float* a, const float* b, int64_t n);
// y[r] = dot(x, w[r], n) for r < 4, bit-identical to four dot() calls (x is read once; faster).
void dot4(const float* x, const float* const* w, int64_t n, float* y);
// y[i] += a * x[i] for i < n, rounded exactly as that scalar loop (vectorised, no FMA).
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace gridq::runtime::cpu

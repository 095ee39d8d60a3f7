// Gridbook (CB) rows for the CPU backend: decoded on the fly, in registers (decode) or into caller scratch
// (prefill), never a resident dense copy (architecture.md). Both give the reference decode's values
// (gridbook/decode.cpp: fp4 w = v·scale_g, exact in BF16 per format.md §16; fp8 w = bf16_rn(fl32(v·s))).
#pragma once

#include "runtime/qmatrix.h"

namespace gridq::runtime::cpu {

// Checks that `m` is a CB matrix this build can decode (rung, codebook, sizes).
Status check_cb(const QMatrix& m);
// Row r of a CB matrix as fp32 (the decoded BF16 weights widened). out[m.cols].
void decode_cb_row(const QMatrix& m, int64_t r, float* out);
// y[i] = dot(row r0 + i, x) in the reference order (dot_kernels.h) for i < n (n <= 4): the rows decoded in
// registers, codeword by codeword, never written out. x [m.cols], fp32 (after the activation contract).
void cb_dot_rows(const QMatrix& m, int64_t r0, int n, const float* x, float* y);

}  // namespace gridq::runtime::cpu

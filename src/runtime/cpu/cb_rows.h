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
// Whether m is the artifact's expert format (fp4 K16 v2, the lattice's 8/8 split) on a CPU with AVX2: the
// rungs with register-decoding kernels (cb_rows.cpp: AVX2; cb_rows_bf16.cpp: AVX-512 VBMI).
bool fused_k16v2(const QMatrix& m);

// The BF16 fast path (bf16_dot.h; needs have_avx512_bf16()). Row r decoded to BF16 (exact: the decoded
// weights are BF16 values). out[m.cols].
void decode_cb_row_bf16(const QMatrix& m, int64_t r, uint16_t* out);
// y[t·ldy + i] for rows r0 + i (i < nr, any count) and tokens t < T: the bits of bf16_dot_rows on the
// rows decoded to BF16, 4 rows at a time. K16 v2 rows at decode (T < 4) are decoded in registers, step by
// step; otherwise each block of 4 rows is decoded once into scratch (cb_rows_bf16.cpp).
void cb_dot_rows_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                      int64_t ldy);

}  // namespace gridq::runtime::cpu

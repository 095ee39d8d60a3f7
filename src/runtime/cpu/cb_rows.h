// Gridbook (CB) rows for the CPU backend: one row decoded on the fly into caller scratch, never a
// resident dense copy (architecture.md).
#pragma once

#include "runtime/qmatrix.h"

namespace gridq::runtime::cpu {

// Checks that `m` is a CB matrix this build can decode (rung, codebook, sizes).
Status check_cb(const QMatrix& m);
// Row r of a CB matrix as fp32 (the decoded BF16 weights widened). out[m.cols].
void decode_cb_row(const QMatrix& m, int64_t r, float* out);

}  // namespace gridq::runtime::cpu

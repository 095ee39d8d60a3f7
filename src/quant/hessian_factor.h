// The factorization CB-GPTQ needs (quantizer.md §5 step 1): the upper Cholesky factor U of the damped inverse
// Hessian, H⁻¹ = UᵀU, computed as chol(H) → inverse → chol in float64. Each output element is summed in a
// fixed order and rows/columns are distributed over threads without shared accumulators, so the result does
// not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace gridq::quant {

// In-place lower Cholesky A = L·Lᵀ of a symmetric [n, n] row-major matrix (only the lower triangle is read;
// the strict upper triangle is zeroed). Returns false when a pivot is not positive and finite.
bool cholesky_lower_inplace(double* A, int n);

struct InverseFactor {
  std::vector<double> U;   // [C, C] row-major, upper triangular: H_damped⁻¹ = UᵀU
  double damp_used = 0.0;  // the relative damping that succeeded (0.1, then 1, 10, 100 on retries)
  bool identity = false;   // true when H carried no information (n_tokens == 0 or diag(H) all zero)
};

// H: [C, C] fp32 (symmetric; the lower triangle is used). H += damp·mean(diag H)·I, then U as above; a failed
// factorization retries with damp·10, at most max_retries times. n_tokens == 0 or mean(diag H) == 0 gives
// U = I (plain nearest-neighbour). Refuses non-finite entries of H, naming `what`.
Expected<InverseFactor> inverse_cholesky_upper(const float* H, int C, int64_t n_tokens, double damp,
                                               int max_retries, const char* what = "H");

}  // namespace gridq::quant

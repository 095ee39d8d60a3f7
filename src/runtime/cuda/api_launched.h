// The host API's launch check (api.cpp, api_act.cpp, api_fill.cpp): a kernel's cudaError_t as a Status naming
// the operation and the call site; cudaErrorNotSupported means no kernel is built for that format and mode.
// Also the row-count checks those files share.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"

namespace gridq::cuda {

inline Status launched(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaErrorNotSupported)
    return err("{}: no CUDA kernel is built for this weight format / mode combination ({}:{})", what, file,
               line);
  return cuda_status(e, what, file, line);
}

// Rows of one GEMV launch (1..kMaxTokens) and of any step (1..kMaxGemmRows).
inline Status check_m(int M, const char* what) {
  if (M < 1 || M > kMaxTokens) return err("{}: M = {} outside 1..{}", what, M, kMaxTokens);
  return {};
}
inline Status check_rows(int M, const char* what) {
  if (M < 1 || M > kMaxGemmRows) return err("{}: M = {} outside 1..{}", what, M, kMaxGemmRows);
  return {};
}

}  // namespace gridq::cuda

#define GRIDQ_LAUNCHED(expr, what) \
  GRIDQ_RETURN_IF_ERROR(::gridq::cuda::launched((expr), what, __FILE__, __LINE__))

// The host API's launch check (api.cpp, api_fill.cpp): a kernel's cudaError_t as a Status naming the
// operation and the call site; cudaErrorNotSupported means no kernel is built for that format and mode.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"
#include "runtime/cuda/cuda_check.h"

namespace gridq::cuda {

inline Status launched(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaErrorNotSupported)
    return err("{}: no CUDA kernel is built for this weight format / mode combination ({}:{})", what, file,
               line);
  return cuda_status(e, what, file, line);
}

}  // namespace gridq::cuda

#define GRIDQ_LAUNCHED(expr, what) \
  GRIDQ_RETURN_IF_ERROR(::gridq::cuda::launched((expr), what, __FILE__, __LINE__))

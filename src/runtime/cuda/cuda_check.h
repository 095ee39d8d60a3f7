// Error checking for the CUDA runtime: every call and every launch is checked, and a failure becomes a
// gridq::Status that names the call site (file:line and the expression), so a caller fails closed.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace gridq::cuda {

inline Status cuda_status(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return {};
  return err("CUDA error at {}:{}: {} failed: {} ({})", file, line, what, cudaGetErrorName(e),
             cudaGetErrorString(e));
}

}  // namespace gridq::cuda

// GRIDQ_CUDA(cudaMemcpy(...)): returns the error from the enclosing function (Status or Expected<T>).
#define GRIDQ_CUDA(expr) GRIDQ_RETURN_IF_ERROR(::gridq::cuda::cuda_status((expr), #expr, __FILE__, __LINE__))
// After a <<<>>> launch: catches configuration errors of that launch (asynchronous faults surface at the next
// synchronizing call, which is itself checked).
#define GRIDQ_CUDA_LAUNCHED(name) \
  GRIDQ_RETURN_IF_ERROR(::gridq::cuda::cuda_status(cudaGetLastError(), "launch of " name, __FILE__, __LINE__))

// Launches of the forward's kernels with programmatic dependent launch (PDL, hopper.md §6) when
// forward_pdl() is on: a kernel may be scheduled while its predecessor drains, and its first statement,
// pdl_entry(), waits for that predecessor to finish (griddepcontrol.wait) before any memory is touched, then
// lets its own successor be scheduled. Waiting first makes every kernel safe whatever it reads or writes; the
// gain is the launch and block start-up hidden behind the previous kernel's tail, and the GEMVs' weight
// prefetch (issued before their own wait, kernels.h) overlapping the small kernels before them.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::detail {

__device__ __forceinline__ void pdl_entry() {
  pdl_wait();
  pdl_launch_dependents();
}

// A launch with the PDL attribute when `pdl` is set (the kernel must wait before touching memory).
template <class... P, class... A>
cudaError_t launch_pdl(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  return e != cudaSuccess ? e : cudaGetLastError();
}

// SMs of the current device, asked once (`fallback` where the query fails).
inline int device_sm_count(int fallback) {
  static const int n = [] {
    int dev = 0, c = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 0;
    return c;
  }();
  return n > 0 ? n : fallback;
}

// The forward's launches: PDL as forward_pdl() says.
template <class... P, class... A>
cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
  return launch_pdl(forward_pdl(), kernel, grid, block, smem, s, std::forward<A>(args)...);
}

}  // namespace gridq::cuda::detail

#define GQ_KLAUNCH(expr)                    \
  do {                                      \
    const cudaError_t gq_e_ = (expr);       \
    if (gq_e_ != cudaSuccess) return gq_e_; \
  } while (0)

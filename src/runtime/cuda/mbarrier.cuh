// Shared-memory mbarriers and 1-D bulk copies through the copy engine (TMA, sm_90): the persistent chain's
// weight ring can be filled by `cp.async.bulk` instead of per-lane `cp.async` (gemv_chain_copy_engine).
// Bulk copies run in the async proxy and complete on an mbarrier (transaction bytes), so the issuing warp has
// no generic-proxy loads in flight when it publishes split-K partials or arrives at the grid barrier.
// Measured: no faster than cp.async (docs/kernels.md §6), so it is off by default.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gridq::cuda::detail {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialisations visible to the async proxy (the copy engine) before first use.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces `bytes` of transactions the phase must see before it completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  const unsigned a = smem_addr(bar);
  unsigned done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}
// Orders this thread's earlier generic-proxy shared-memory accesses before later async-proxy ones (a stage
// that was read is about to be overwritten by the copy engine).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// global -> shared copy of `bytes` (multiple of 16, both ends 16-byte aligned) completing on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace gridq::cuda::detail

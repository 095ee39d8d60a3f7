// Grid-wide barrier for persistent kernels whose blocks are all resident (launched with the cooperative
// attribute, which makes the launch fail rather than deadlock when they would not be).
//
// bar[0] counts arrivals, bar[1] is the generation. The last block to arrive resets the count and bumps the
// generation with release semantics; the others spin on the generation with acquire loads. The count returns
// to 0 at every barrier, so the same two words serve every launch and every graph replay (zero them once).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gridq::cuda::detail {

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// Every thread of every block calls this; on return all memory writes made by any block before its call are
// visible to every thread. Thread 0 publishes the block's writes (ordered before it by __syncthreads) with a
// release RMW and reads the others' with acquire loads; no full fences, which on this GPU also wait for
// the thread's earlier loads still in flight (the chain's weight prefetch).
__device__ __forceinline__ void grid_sync(unsigned* bar, unsigned nblocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    // The generation is read before arriving: it cannot move until this block has arrived.
    const unsigned gen = ld_acquire_gpu(bar + 1);
    if (atom_add_acq_rel_gpu(bar, 1) == nblocks - 1) {
      bar[0] = 0;  // ordered before the release below; nobody arrives again before seeing it
      st_release_gpu(bar + 1, gen + 1);
    } else {
      while (ld_acquire_gpu(bar + 1) == gen) {
      }
    }
  }
  __syncthreads();
}

}  // namespace gridq::cuda::detail

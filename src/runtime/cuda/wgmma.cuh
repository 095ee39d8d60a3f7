// Warpgroup MMAs (wgmma, sm_90a) with A from registers and B from shared memory: the pieces the wide grouped
// experts use (moe_grouped_wide.cu). A warpgroup is 4 consecutive warps; each warp hands the A fragment of
// its 16 rows in the register layout of mma.sync m16n8k16 (the GEMV's decoders produce it), and the tensor
// cores read B once for the 64 rows. A k16 step rounds as the mma.sync k16 step does
// (bench/tools/wgmma_probe.cu, session 28: 0 of 16,384,000 outputs differ), so the GEMV's bits are kept.
#pragma once

#include <cstdint>

namespace gridq::cuda::detail {

// Shared-memory matrix descriptor of B, K-major with the 128-byte swizzle: a row (one N index) holds 64
// K-contiguous BF16 (128 bytes) whose 16-byte chunk j sits at slot j ^ (row % 8), 8 rows an atom of 1024
// bytes (the stride byte offset between 8-row groups; the leading byte offset is unused for K-major swizzled
// layouts). A k16 step inside the atom starts 32 bytes further; the atom must be 1024-byte aligned.
__device__ __forceinline__ uint64_t wg_desc_sw128(uint32_t smem_addr) {
  return ((smem_addr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
// Orders this thread's register writes (A fragments, zeroed accumulators) before the next wgmma reads them.
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

#define GQ_WG_R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
// d[32] += A (the warpgroup's 64 × 16, this warp's 16 rows in a) · B (16 × 64 at desc), FP32 accumulation.
// d[4·nt + i]: row g + 8·(i / 2), column 8·nt + 2t + i % 2 of the warp's 16 × 64 (mma.sync's C layout).
__device__ __forceinline__ void wgmma_bf16_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,"
      "%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, "
      "%36, 1, 1, 1, 0;"
      : GQ_WG_R4(0), GQ_WG_R4(4), GQ_WG_R4(8), GQ_WG_R4(12), GQ_WG_R4(16), GQ_WG_R4(20), GQ_WG_R4(24),
        GQ_WG_R4(28)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc)
      : "memory");
}
#undef GQ_WG_R4

}  // namespace gridq::cuda::detail

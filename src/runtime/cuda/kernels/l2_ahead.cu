// Weights requested into L2 ahead of the kernel that reads them (forward_kernels.h, l2_ahead): bulk L2
// prefetches issued by a small kernel on a stream of their own, so that a decode step's latency-bound phases
// (routing, attention) leave the memory system busy with the next matrices' bytes. A prefetch is a hint: it
// changes no value and no order of any sum.
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr long long kChunk = 32 << 10;  // bytes per prefetch instruction (a multiple of 16)

__device__ void prefetch_range(const uint8_t* p, long long bytes, int lane, int lanes) {
  for (long long off = static_cast<long long>(lane) * kChunk; off < bytes; off += lanes * kChunk) {
    const long long n = bytes - off < kChunk ? bytes - off : kChunk;
    prefetch_l2(p + off, static_cast<uint32_t>(n & ~15LL));
  }
}

__global__ void __launch_bounds__(kThreads) l2_range_kernel(const uint8_t* p, long long bytes) {
  prefetch_range(p, bytes, static_cast<int>(blockIdx.x * kThreads + threadIdx.x),
                 static_cast<int>(gridDim.x * kThreads));
}

// Block b: the experts chosen by pair b (ids[b]): its slice of each stack.
__global__ void __launch_bounds__(kThreads)
    l2_experts_kernel(const int* ids, int E, const uint8_t* a, long long a_stride, const uint8_t* b,
                      long long b_stride) {
  const int e = ids[blockIdx.x];
  if (e < 0 || e >= E) return;
  prefetch_range(a + e * a_stride, a_stride, static_cast<int>(threadIdx.x), kThreads);
  if (b != nullptr) prefetch_range(b + e * b_stride, b_stride, static_cast<int>(threadIdx.x), kThreads);
}

}  // namespace

cudaError_t raw_l2_ahead(const void* p, long long bytes, cudaStream_t s) {
  if (p == nullptr || bytes <= 0) return cudaSuccess;
  // Addresses are 16-byte aligned (device buffers); a tail under 16 bytes is left to the reader.
  const long long chunks = (bytes + kChunk - 1) / kChunk;
  const unsigned blocks =
      static_cast<unsigned>(chunks < 8 * kThreads ? (chunks + kThreads - 1) / kThreads : 8);
  l2_range_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t*>(p), bytes);
  return cudaGetLastError();
}

cudaError_t raw_l2_ahead_experts(const int* ids, int n_ids, int E, const void* a, long long a_stride,
                                 const void* b, long long b_stride, cudaStream_t s) {
  if (n_ids <= 0 || a == nullptr) return cudaSuccess;
  l2_experts_kernel<<<static_cast<unsigned>(n_ids), kThreads, 0, s>>>(
      ids, E, static_cast<const uint8_t*>(a), a_stride, static_cast<const uint8_t*>(b), b_stride);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

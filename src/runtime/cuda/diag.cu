// Diagnostic kernels for `gridq bench kernels --diag`: what the graph harness itself costs per node (an empty
// kernel), what a pure streaming read of a weight-sized buffer costs per node (the floor any GEMV of that
// many bytes can reach in the same harness), and the same stream as ONE persistent kernel with a grid barrier
// between buffers (the floor of a persistent chain). None of these is used for serving.
#include <algorithm>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/grid_sync.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kDiagThreads = 256;
constexpr int kMaxLoads = 8;  // 16-byte loads per thread per buffer (persistent stream)

__global__ void diag_empty_kernel(int pdl) {
  if (pdl) {
    pdl_launch_dependents();
    pdl_wait();
  }
}

// Streams [src, src+bytes) once (16-byte loads, all issued before the first use) and writes one word per
// block so the loads cannot be dropped. early: loads are issued before griddepcontrol.wait (they do not
// depend on the previous kernel), as the GEMV does with its weights.
__global__ void __launch_bounds__(kDiagThreads)
    diag_stream_kernel(const uint4* src, size_t n16, uint32_t* out, int pdl, int early) {
  if (pdl) pdl_launch_dependents();
  if (pdl && !early) pdl_wait();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = ld_stream16(src + i + j * stride);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n16; i += stride) {
    uint4 v = ld_stream16(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (pdl && early) pdl_wait();
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if ((threadIdx.x & 31) == 0) atomicXor(out + blockIdx.x % 64, acc);
}

// One launch over `count` buffers of n16 16-byte words each, a grid barrier after each buffer; the loads of
// buffer i+1 are issued before the barrier that ends buffer i.
__global__ void __launch_bounds__(kDiagThreads)
    diag_stream_persistent_kernel(const uint4* src, size_t n16, int count, uint32_t* out, unsigned* bar) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  uint32_t acc = 0;
  uint4 cur[kMaxLoads], nxt[kMaxLoads];
  auto load = [&](uint4(&v)[kMaxLoads], int b) {
    const uint4* s = src + n16 * b;
#pragma unroll
    for (int j = 0; j < kMaxLoads; ++j) {
      const size_t i = tid + j * stride;
      v[j] = i < n16 ? ld_stream16(s + i) : make_uint4(0, 0, 0, 0);
    }
  };
  load(cur, 0);
  for (int b = 0; b < count; ++b) {
    if (b + 1 < count) load(nxt, b + 1);
#pragma unroll
    for (int j = 0; j < kMaxLoads; ++j) acc ^= cur[j].x ^ cur[j].y ^ cur[j].z ^ cur[j].w;
    grid_sync(bar, gridDim.x);
#pragma unroll
    for (int j = 0; j < kMaxLoads; ++j) cur[j] = nxt[j];
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if ((threadIdx.x & 31) == 0) atomicXor(out + blockIdx.x % 64, acc);
}

int stream_blocks(int blocks_per_sm) {
  int dev = 0, sms = 132;
  if (cudaGetDevice(&dev) == cudaSuccess)
    (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms * blocks_per_sm;
}

}  // namespace

cudaError_t raw_diag_empty(int blocks, bool pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kDiagThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, diag_empty_kernel, pdl ? 1 : 0);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t raw_diag_stream(const void* src, size_t bytes, uint32_t* out, int blocks_per_sm, bool pdl,
                            bool early, cudaStream_t s) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(stream_blocks(blocks_per_sm)));
  cfg.blockDim = dim3(kDiagThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, diag_stream_kernel, static_cast<const uint4*>(src), bytes / 16,
                                     out, pdl ? 1 : 0, early ? 1 : 0);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t raw_diag_stream_persistent(const void* src, size_t bytes_each, int count, uint32_t* out,
                                       unsigned* bar, cudaStream_t s) {
  int bps = 0;
  cudaError_t e =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, diag_stream_persistent_kernel, kDiagThreads, 0);
  if (e != cudaSuccess) return e;
  const int blocks = stream_blocks(std::min(bps, 4));
  if (bytes_each / 16 > static_cast<size_t>(blocks) * kDiagThreads * kMaxLoads) return cudaErrorInvalidValue;
  diag_stream_persistent_kernel<<<blocks, kDiagThreads, 0, s>>>(static_cast<const uint4*>(src),
                                                                bytes_each / 16, count, out, bar);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

// Deterministic synthetic data on the device (benchmarks; tests use host-generated data).
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kFillThreads = 256;
constexpr int kFillBlocks = 2048;

__global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * 8; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * 8) {
    uint64_t r = mix64(seed ^ (i * 0x9E3779B97F4A7C15ull));
    if (i + 8 <= n)
      *reinterpret_cast<uint64_t*>(p + i) = r;
    else
      for (size_t j = i; j < n; ++j, r >>= 8) p[j] = static_cast<uint8_t>(r);
  }
}
__global__ void fill_bf16_kernel(uint16_t* p, size_t n, float a, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix64(seed + i) >> 40) * 0x1p-24f;  // [0, 1)
    p[i] = f32_to_bf16_bits((2.0f * u - 1.0f) * a);
  }
}
__global__ void fill_f32_kernel(float* p, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(mix64(seed + i) >> 40) * 0x1p-24f;
    p[i] = lo + (hi - lo) * u;
  }
}
__global__ void fill_e4m3_kernel(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint8_t b = static_cast<uint8_t>(mix64(seed + i));
    if ((b & 0x7F) == 0x7F) b ^= 1;  // no NaN
    p[i] = b;
  }
}
// CB tiles: index bytes uniform; scale planes legal. v2: E in 121..126 (every code legal there), codes
// uniform; v1: E4M3 scales with exponent field 1..9, sign clear.
__global__ void fill_cb_kernel(uint8_t* p, int k, int v, long long units, int unit_bytes, uint64_t seed) {
  const long long n = units * unit_bytes;
  const int idx_bytes = 64 * k;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int o = static_cast<int>(i % unit_bytes);
    const uint64_t r = mix64(seed + static_cast<uint64_t>(i));
    uint8_t b = static_cast<uint8_t>(r);
    if (o >= idx_bytes) {
      const int so = o - idx_bytes;
      if (v == 2) {
        if (so >= 128) b = static_cast<uint8_t>(121 + (r >> 8) % 6);  // E
      } else {
        b = static_cast<uint8_t>((((r >> 8) % 9 + 1) << 3) | ((r >> 16) & 7));
      }
    }
    p[i] = b;
  }
}

}  // namespace

cudaError_t raw_fill_bytes(void* p, size_t n, uint64_t seed, cudaStream_t s) {
  fill_bytes_kernel<<<kFillBlocks, kFillThreads, 0, s>>>(static_cast<uint8_t*>(p), n, seed);
  return cudaGetLastError();
}
cudaError_t raw_fill_bf16(uint16_t* p, size_t n, float a, uint64_t seed, cudaStream_t s) {
  fill_bf16_kernel<<<kFillBlocks, kFillThreads, 0, s>>>(p, n, a, seed);
  return cudaGetLastError();
}
cudaError_t raw_fill_e4m3(uint8_t* p, size_t n, uint64_t seed, cudaStream_t s) {
  fill_e4m3_kernel<<<kFillBlocks, kFillThreads, 0, s>>>(p, n, seed);
  return cudaGetLastError();
}
cudaError_t raw_fill_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  fill_f32_kernel<<<kFillBlocks, kFillThreads, 0, s>>>(p, n, lo, hi, seed);
  return cudaGetLastError();
}
cudaError_t raw_fill_cb_tiles(uint8_t* p, int k, int v, long long units, uint64_t seed, cudaStream_t s) {
  const int ub = 16 * (4 * k + (v == 2 ? 9 : 16));
  fill_cb_kernel<<<kFillBlocks, kFillThreads, 0, s>>>(p, k, v, units, ub, seed);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

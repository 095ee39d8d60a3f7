// Row gathers and scatters for the teacher's grouped experts (teacher_kernels.h). Pure copies: no bits
// change.
#include "runtime/cuda/teacher/teacher_kernels.h"

namespace gridq::cuda::detail {
namespace {

constexpr int kThreads = 256;

// One block per row; 16-byte moves when the row allows (cols a multiple of the vector), else elements.
__global__ void __launch_bounds__(kThreads)
    gather_bf16_kernel(const uint16_t* src, const int* idx, int cols, uint16_t* dst) {
  const long long p = blockIdx.x, r = idx[p];
  if (cols % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src + r * cols);
    uint4* d = reinterpret_cast<uint4*>(dst + p * cols);
    for (int i = threadIdx.x; i < cols / 8; i += kThreads) d[i] = s[i];
  } else {
    for (int i = threadIdx.x; i < cols; i += kThreads) dst[p * cols + i] = src[r * cols + i];
  }
}

__global__ void __launch_bounds__(kThreads)
    scatter_f32_kernel(const float* src, long long ld_src, const int* idx, int cols, float* dst) {
  const long long p = blockIdx.x, r = idx[p];
  if (cols % 4 == 0 && ld_src % 4 == 0) {
    const float4* s = reinterpret_cast<const float4*>(src + p * ld_src);
    float4* d = reinterpret_cast<float4*>(dst + r * cols);
    for (int i = threadIdx.x; i < cols / 4; i += kThreads) d[i] = s[i];
  } else {
    for (int i = threadIdx.x; i < cols; i += kThreads) dst[r * cols + i] = src[p * ld_src + i];
  }
}

}  // namespace

cudaError_t raw_gather_rows_bf16(const uint16_t* src, const int* idx, int n, int cols, uint16_t* dst,
                                 cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  gather_bf16_kernel<<<n, kThreads, 0, s>>>(src, idx, cols, dst);
  return cudaGetLastError();
}

cudaError_t raw_scatter_rows_f32(const float* src, long long ld_src, const int* idx, int n, int cols,
                                 float* dst, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  scatter_f32_kernel<<<n, kThreads, 0, s>>>(src, ld_src, idx, cols, dst);
  return cudaGetLastError();
}

}  // namespace gridq::cuda::detail

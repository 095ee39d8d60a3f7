// Shared-memory opt-ins (device_util.cuh opt_in_smem; a .cu for that header): the largest size set so far
// per (device, kernel), so that a launch sets the attribute only when it asks for more than before.
#include <map>
#include <mutex>
#include <utility>

#include "runtime/cuda/device_util.cuh"

namespace gridq::cuda::detail {

cudaError_t opt_in_smem_bytes(const void* kern, size_t bytes) {
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> set;  // bytes the attribute allows now
  const std::lock_guard<std::mutex> lock(mu);
  size_t& have = set[{dev, kern}];
  if (bytes <= have) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) have = bytes;
  return e;
}

}  // namespace gridq::cuda::detail

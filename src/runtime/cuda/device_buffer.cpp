#include "runtime/cuda/device_buffer.h"

#include "core/device_meter.h"
#include "runtime/cuda/cuda_check.h"

namespace gridq::cuda {

Expected<DeviceBuffer> DeviceBuffer::alloc(size_t bytes, const std::string& what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    b.p_ = nullptr;
    return err("cudaMalloc of {} bytes for {} failed: {}", bytes, what, cudaGetErrorString(e));
  }
  b.n_ = bytes;
  device_bytes_changed(static_cast<int64_t>(bytes));
  return b;
}

void DeviceBuffer::release() {
  // No report: a failing cudaFree means the context is already broken and the next checked call reports it.
  if (!p_) return;
  (void)cudaFree(p_);
  device_bytes_changed(-static_cast<int64_t>(n_));
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

Status DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  if (offset + bytes > n_)
    return err("device upload of {} bytes at {} overflows a {}-byte buffer", bytes, offset, n_);
  GRIDQ_CUDA(cudaMemcpy(static_cast<char*>(p_) + offset, src, bytes, cudaMemcpyHostToDevice));
  return {};
}

Status DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > n_)
    return err("device download of {} bytes at {} overflows a {}-byte buffer", bytes, offset, n_);
  GRIDQ_CUDA(cudaMemcpy(dst, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost));
  return {};
}

Status DeviceBuffer::zero() {
  if (n_) GRIDQ_CUDA(cudaMemset(p_, 0, n_));
  return {};
}

Expected<Stream> Stream::create() {
  Stream s;
  GRIDQ_CUDA(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  return s;
}

Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}

Status Stream::sync() const {
  GRIDQ_CUDA(cudaStreamSynchronize(s_));
  return {};
}

Expected<DeviceInfo> device_info() {
  int dev = 0;
  GRIDQ_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  GRIDQ_CUDA(cudaGetDeviceProperties(&p, dev));
  DeviceInfo d;
  d.sm_count = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  d.smem_optin = p.sharedMemPerBlockOptin;
  d.name = p.name;
  return d;
}

}  // namespace gridq::cuda

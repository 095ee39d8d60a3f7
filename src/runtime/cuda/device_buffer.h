// Owning handles for device memory (plain cudaMalloc; never managed memory) and streams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "core/status.h"

namespace gridq::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `what` names the buffer in the error message when the allocation fails.
  static Expected<DeviceBuffer> alloc(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return n_; }
  bool empty() const { return p_ == nullptr; }

  Status upload(const void* src, size_t bytes, size_t offset = 0);
  Status download(void* dst, size_t bytes, size_t offset = 0) const;
  Status zero();

 private:
  void release();  // frees the memory (if any) and takes it off core/device_meter's count

  void* p_ = nullptr;
  size_t n_ = 0;
};

class Stream {
 public:
  static Expected<Stream> create();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  Status sync() const;

 private:
  Stream() = default;
  cudaStream_t s_ = nullptr;
};

// Device properties used for sizing grids (read once).
struct DeviceInfo {
  int sm_count = 0;
  int major = 0, minor = 0;
  size_t l2_bytes = 0;
  size_t smem_optin = 0;
  std::string name;
};
Expected<DeviceInfo> device_info();

}  // namespace gridq::cuda

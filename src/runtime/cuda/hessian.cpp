// DeviceHessian's host side (hessian.h); the kernels are in hessian.cu.
#include "runtime/cuda/hessian.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace gridq::cuda {

Expected<DeviceHessian> DeviceHessian::create(int cols, cudaStream_t stream) {
  if (cols <= 0) return err("device hessian: {} columns; expected > 0", cols);
  DeviceHessian h;
  h.cols_ = cols;
  h.stream_ = stream;
  const size_t C = static_cast<size_t>(cols);
  GRIDQ_ASSIGN_OR_RETURN(h.h_, DeviceBuffer::alloc(C * C * 4, "device hessian H"));
  GRIDQ_ASSIGN_OR_RETURN(
      h.stage_, DeviceBuffer::alloc(static_cast<size_t>(kStageRows) * C * 4, "device hessian staging rows"));
  GRIDQ_CUDA(cudaMemsetAsync(h.h_.as<float>(), 0, C * C * 4, stream));
  return h;
}

Status DeviceHessian::add_rows(const float* x, int64_t n, const float* scale) {
  if (n < 0) return err("device hessian: {} rows", n);
  const int64_t C = cols_;
  while (n > 0) {
    const int64_t take = std::min(n, kStageRows - staged_);
    float* dst = stage_.as<float>() + staged_ * C;
    if (scale) {
      GRIDQ_CUDA(detail::raw_scale_rows(x, scale, take, cols_, dst, stream_));
      scale += take;
    } else {
      GRIDQ_CUDA(
          cudaMemcpyAsync(dst, x, static_cast<size_t>(take * C) * 4, cudaMemcpyDeviceToDevice, stream_));
    }
    x += take * C;
    n -= take;
    n_ += take;
    staged_ += take;
    if (staged_ == kStageRows) GRIDQ_RETURN_IF_ERROR(absorb());  // whole blocks: kStageRows % 256 == 0
  }
  return {};
}

Status DeviceHessian::absorb() {
  if (staged_ == 0) return {};
  GRIDQ_CUDA(detail::raw_hessian_tiles(stage_.as<float>(), staged_, cols_, h_.as<float>(), stream_));
  staged_ = 0;
  return {};
}

Expected<std::vector<float>> DeviceHessian::finish() {
  GRIDQ_RETURN_IF_ERROR(absorb());  // the last partial block too
  const size_t C = static_cast<size_t>(cols_);
  std::vector<float> H(C * C);
  GRIDQ_CUDA(cudaMemcpyAsync(H.data(), h_.as<float>(), C * C * 4, cudaMemcpyDeviceToHost, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < C; ++i)
    for (size_t j = i + 1; j < C; ++j) H[j * C + i] = H[i * C + j];
  h_ = DeviceBuffer{};
  stage_ = DeviceBuffer{};
  return H;
}

namespace {

// The shared transfer path: a stream and a pinned staging buffer of whole blocks, guarded by a mutex.
struct Transfer {
  std::mutex mu;
  cudaStream_t stream = nullptr;
  float* pinned = nullptr;  // [kRows, max_cols] host
  DeviceBuffer dev;         // [kRows, max_cols] device
  int64_t cap_floats = 0;
  static constexpr int64_t kRows = 4096;  // whole blocks per upload
  Status reserve(int cols) {
    const int64_t need = kRows * cols;
    if (need <= cap_floats) return {};
    if (!stream) GRIDQ_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (pinned) GRIDQ_CUDA(cudaFreeHost(pinned));
    pinned = nullptr;
    cap_floats = 0;
    GRIDQ_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), static_cast<size_t>(need) * 4));
    GRIDQ_ASSIGN_OR_RETURN(dev, DeviceBuffer::alloc(static_cast<size_t>(need) * 4, "hessian transfer rows"));
    cap_floats = need;
    return {};
  }
};
Transfer& transfer() {
  static Transfer* t = new Transfer;  // process lifetime: freed with the process, after any static user
  return *t;
}

class HostRowsHessian final : public runtime::DeviceHessianStore {
 public:
  explicit HostRowsHessian(int cols) : cols_(cols) {}
  Status init() {
    const size_t C = static_cast<size_t>(cols_);
    GRIDQ_ASSIGN_OR_RETURN(h_, DeviceBuffer::alloc(C * C * 4, "device hessian H"));
    return h_.zero();
  }
  Status add_blocks(const float* rows, int64_t n) override {
    Transfer& t = transfer();
    std::lock_guard lk(t.mu);
    GRIDQ_RETURN_IF_ERROR(t.reserve(cols_));
    const int64_t C = cols_;
    for (int64_t r = 0; r < n; r += Transfer::kRows) {  // kRows is whole blocks: the block cuts stay
      const int64_t k = std::min(Transfer::kRows, n - r);
      std::memcpy(t.pinned, rows + r * C, static_cast<size_t>(k * C) * 4);
      GRIDQ_CUDA(cudaMemcpyAsync(t.dev.as<float>(), t.pinned, static_cast<size_t>(k * C) * 4,
                                 cudaMemcpyHostToDevice, t.stream));
      GRIDQ_CUDA(detail::raw_hessian_tiles(t.dev.as<float>(), k, cols_, h_.as<float>(), t.stream));
      GRIDQ_CUDA(cudaStreamSynchronize(t.stream));  // the pinned buffer is reused next
    }
    return {};
  }
  Expected<std::vector<float>> upper() override {
    std::vector<float> H(static_cast<size_t>(cols_) * static_cast<size_t>(cols_));
    GRIDQ_RETURN_IF_ERROR(h_.download(H.data(), H.size() * 4));
    return H;
  }

 private:
  int cols_ = 0;
  DeviceBuffer h_;
};

}  // namespace

Expected<std::unique_ptr<runtime::DeviceHessianStore>> make_host_rows_hessian(int cols) {
  if (cols <= 0) return err("device hessian: {} columns; expected > 0", cols);
  auto h = std::make_unique<HostRowsHessian>(cols);
  GRIDQ_RETURN_IF_ERROR(h->init());
  return std::unique_ptr<runtime::DeviceHessianStore>(std::move(h));
}

}  // namespace gridq::cuda

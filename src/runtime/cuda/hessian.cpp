// DeviceHessian's host side (hessian.h); the kernels are in hessian.cu.
#include "runtime/cuda/hessian.h"

#include <algorithm>
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
    if (staged_ == kStageRows) GRIDQ_RETURN_IF_ERROR(absorb(staged_ / kBlockRows * kBlockRows));
  }
  return {};
}

Status DeviceHessian::absorb(int64_t rows) {
  if (rows <= 0) return {};
  GRIDQ_CUDA(detail::raw_hessian_tiles(stage_.as<float>(), rows, cols_, h_.as<float>(), stream_));
  const int64_t C = cols_, tail = staged_ - rows;
  if (tail > 0)  // the unfinished block moves to the front (rows ≥ 256 > tail: the ranges do not overlap)
    GRIDQ_CUDA(cudaMemcpyAsync(stage_.as<float>(), stage_.as<float>() + rows * C,
                               static_cast<size_t>(tail * C) * 4, cudaMemcpyDeviceToDevice, stream_));
  staged_ = tail;
  return {};
}

Expected<std::vector<float>> DeviceHessian::finish() {
  GRIDQ_RETURN_IF_ERROR(absorb(staged_));
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

}  // namespace gridq::cuda

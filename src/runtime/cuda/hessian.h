// H = Σ xᵀx of one Linear input on the device (the GPU quantizer's S3, quantizer.md §2), the same bits as
// quant::HessianAccumulator on the CPU: rows are cut into blocks of 256 in arrival order, each element of a
// block's XᵀX is one fused multiply-add chain over the block's rows in row order starting from zero, and the
// block sums are added to H in block order. So H depends only on the sequence of rows (not on how they
// arrive, nor on the launch shape), and the CPU and GPU paths of `gridq quantize` agree bit for bit.
//
//   auto h = DeviceHessian::create(3072, stream);   // [3072, 3072] fp32 on the device, zero
//   h->add_rows(x_dev, n);                           // x_dev [n, 3072] fp32 on the device
//   h->add_rows(x_dev2, n2, scale_dev);              // rows multiplied by scale [n2] first (router weights)
//   std::vector<float> H = *h->finish();             // both triangles; the accumulator is spent
//
// The upper triangle (j ≥ i) is accumulated by 64×64 tiles; finish() mirrors it, as the CPU does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kparams.h"
#include "runtime/device.h"

namespace gridq::cuda {

class DeviceHessian {
 public:
  static constexpr int64_t kBlockRows = detail::kHessianBlockRows;  // = quant::HessianAccumulator's
  static constexpr int64_t kStageRows = 16384;                      // rows staged before a launch
  static_assert(kStageRows % kBlockRows == 0, "a full stage is whole blocks");

  static Expected<DeviceHessian> create(int cols, cudaStream_t stream);
  int cols() const { return cols_; }
  int64_t rows() const { return n_; }

  // x [n, cols] fp32 in device memory, read before the call returns its work to the stream (the caller may
  // reuse x after a stream sync). scale: optional device [n], multiplies each row first (fp32, rounded
  // before the products, like the CPU accumulator).
  Status add_rows(const float* x, int64_t n, const float* scale = nullptr);
  // Absorbs every row, the last partial block too, and returns H [cols, cols] (both triangles).
  Expected<std::vector<float>> finish();
  // Device bytes held (H and the staging rows).
  size_t bytes() const { return h_.bytes() + stage_.bytes(); }

 private:
  // Every staged row into H: whole blocks while the stage fills, the partial last block at finish().
  Status absorb();
  int cols_ = 0;
  int64_t n_ = 0, staged_ = 0;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer h_;      // [cols, cols] fp32, upper triangle valid until finish()
  DeviceBuffer stage_;  // [kStageRows, cols] fp32
};

// The quantizer's hook (runtime::CudaBackendHooks::hessian): an H on the device fed with host rows through
// one process-wide pinned transfer buffer (the streamer absorbs its accumulators from several threads; the
// uploads take turns). Only H lives on the device per input: [cols, cols] fp32.
Expected<std::unique_ptr<runtime::DeviceHessianStore>> make_host_rows_hessian(int cols);

}  // namespace gridq::cuda

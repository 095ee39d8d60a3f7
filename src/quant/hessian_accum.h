// Second-moment accumulators of one Linear input (quantizer.md §2 S3): H = Σ xᵀx over a stream of rows in
// fp32, and the held-out rows kept beside it.
//
// Determinism: rows are cut into blocks of kBlockRows in arrival order; each block's XᵀX is computed tile by
// tile, every tile summing the block's rows in row order with fused multiply-adds, and added to H in block
// order. So H depends only on the sequence of rows: not on the thread count, nor on how the rows were
// delivered (chunk sizes) or when blocks are absorbed. The AVX2+FMA kernel and the portable one (std::fma)
// give identical bits.
//
// Threads: one accumulator is single-threaded (no OpenMP inside). Callers with many accumulators (one per
// Linear input and expert) buffer a chunk of rows into each and then absorb() them in parallel, one
// accumulator per thread: one parallel region per chunk instead of one per 256-row block.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "runtime/device.h"

namespace gridq::quant {

class HessianAccumulator {
 public:
  static constexpr int64_t kBlockRows = 256;

  explicit HessianAccumulator(int cols = 0);
  // H on the GPU (`gridq quantize --device cuda`): the blocks absorb() and finish() hand over go to a
  // runtime::DeviceHessianStore instead of the CPU tiles, with the same bits (cuda/hessian.h). Fails when
  // this program has no CUDA backend or the device allocation fails.
  static Expected<HessianAccumulator> on_device(int cols);
  // The first device error of add_rows/absorb/finish (always ok on the CPU path); finish() of a failed
  // accumulator returns an empty H.
  const Status& status() const { return dev_status_; }
  int cols() const { return cols_; }
  int64_t rows() const { return n_; }

  // x [n, cols] row-major; `scale` (optional) [n] multiplies each row first (router-weighted H). Rows are
  // buffered; more than kMaxPendingRows of them are absorbed right away (bounded memory).
  void add_rows(const float* x, int64_t n, const float* scale = nullptr);
  // Adds every complete block of buffered rows to H.
  void absorb();
  int64_t pending_rows() const { return n_pending_; }
  // Absorbs everything, the last partial block too, and returns H [cols, cols] (both triangles). The
  // accumulator is spent.
  std::vector<float> finish();
  // Bytes held (H and the row buffer; the packed panels are per-thread scratch).
  int64_t bytes() const;

  static constexpr int64_t kMaxPendingRows = 16384;

 private:
  void add_block(const float* x, int64_t B);   // x [B, cols], B ≤ kBlockRows
  void add_device(const float* x, int64_t n);  // x [n, cols], whole blocks (or the final partial one)
  int cols_ = 0;
  std::shared_ptr<runtime::DeviceHessianStore> dev_;  // set: H lives on the device, h_ stays empty
  Status dev_status_;
  int64_t n_ = 0;
  std::vector<float> h_;        // [cols, cols]; the upper triangle (j >= i) is accumulated
  std::vector<float> pending_;  // [n_pending_, cols] rows not yet added
  int64_t n_pending_ = 0;
};

// Up to `cap` held-out rows in arrival (token) order, spread evenly over all rows offered: row k of the
// stream is kept iff k % stride == 0, where stride is the smallest power of two that keeps ≤ cap rows.
class HoldoutRows {
 public:
  explicit HoldoutRows(int cols = 0, int cap = 512) : cols_(cols), cap_(cap) {}
  void add(const float* x);  // x [cols]
  int64_t seen() const { return seen_; }
  int64_t count() const { return static_cast<int64_t>(rows_.size()) / (cols_ > 0 ? cols_ : 1); }
  std::vector<float>& rows() { return rows_; }  // [count, cols]
  int64_t bytes() const { return static_cast<int64_t>(rows_.capacity() * sizeof(float)); }

 private:
  int cols_ = 0;
  int cap_ = 512;
  int64_t stride_ = 1;
  int64_t seen_ = 0;
  std::vector<float> rows_;
};

}  // namespace gridq::quant

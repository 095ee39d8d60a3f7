// A weight is a matrix with a format (architecture.md): every Linear the runtime applies is a QMatrix
// whose storage is borrowed (mmap or artifact buffers), never copied or expanded. Kernels dispatch on
// `format` once per call; a CB matrix is decoded one row at a time into scratch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/weight_map.h"

namespace gridq::gridbook {
struct Rung;
struct Codebook;
}  // namespace gridq::gridbook

namespace gridq::runtime {

enum class WeightFormat {
  kBF16,  // data: uint16 [rows, cols]
  kF32,   // data: float [rows, cols]
  kFP8,   // compressed-tensors W8A8: data e4m3 [rows, cols], row_scale f32 [rows]; activations FP8 per token
  kCB,    // gridbook rung: data u8 [rows, row_bytes]; fp8 rungs also row_scale [rows]
};

const char* format_name(WeightFormat f);

struct QMatrix {
  WeightFormat format = WeightFormat::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  const float* row_scale = nullptr;              // kFP8, kCB with an fp8 grid: [rows]
  int64_t row_bytes = 0;                         // kCB: (cols / 256) * type_size
  const gridbook::Rung* rung = nullptr;          // kCB
  const gridbook::Codebook* codebook = nullptr;  // kCB
  int act_bits = 16;  // 16: no activation QDQ; 8: FP8 per-token QDQ (§14.2); 4: FP4 group-16 QDQ (§14.1)
  // CPU backend: products run on the fast path (cpu/bf16_dot.h: activations rounded to BF16, AVX512-BF16
  // dots) instead of the reference order. Set by the CPU backend for --cpu-kernels bf16, on kBF16, kFP8 and
  // kCB matrices only (never kF32, never the router).
  bool cpu_bf16_dot = false;
};

// A BF16/F32 checkpoint weight as a QMatrix (no copy).
Expected<QMatrix> qmatrix_from_ref(const model::WeightRef& ref);
// A BF16/F32 vector weight converted to fp32 (norms, biases: small).
Expected<std::vector<float>> vector_from_ref(const model::WeightRef& ref);

// Row r of `m` as fp32 into out[cols] (any format; CB decodes the row). Used by embeddings and tests.
void dequantize_row(const QMatrix& m, int64_t r, float* out);

}  // namespace gridq::runtime

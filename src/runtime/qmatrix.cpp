#include "runtime/qmatrix.h"

#include <cstring>

#include "core/numerics.h"
#include "runtime/cpu/cb_rows.h"

namespace gridq::runtime {

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBF16: return "BF16";
    case WeightFormat::kF32: return "F32";
    case WeightFormat::kFP8: return "FP8";
    case WeightFormat::kCB: return "CB";
  }
  return "?";
}

Expected<QMatrix> qmatrix_from_ref(const model::WeightRef& ref) {
  QMatrix m;
  m.rows = ref.rows;
  m.cols = ref.cols;
  m.data = ref.data();
  if (ref.info->dtype == io::DType::BF16) {
    m.format = WeightFormat::kBF16;
  } else if (ref.info->dtype == io::DType::F32) {
    m.format = WeightFormat::kF32;
  } else {
    return err("tensor '{}': dtype {} cannot be used as a dense weight", ref.tensor, io::dtype_name(ref.info->dtype));
  }
  return m;
}

Expected<std::vector<float>> vector_from_ref(const model::WeightRef& ref) {
  GRIDQ_ASSIGN_OR_RETURN(QMatrix m, qmatrix_from_ref(ref));
  std::vector<float> out(static_cast<size_t>(ref.rows * ref.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

void dequantize_row(const QMatrix& m, int64_t r, float* out) {
  switch (m.format) {
    // memcpy: checkpoint tensors are not guaranteed to be aligned to their element size.
    case WeightFormat::kBF16: {
      const uint8_t* p = static_cast<const uint8_t*>(m.data) + r * m.cols * 2;
      for (int64_t c = 0; c < m.cols; ++c) {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = bf16_to_f32(h);
      }
      return;
    }
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const uint8_t*>(m.data) + r * m.cols * 4, static_cast<size_t>(m.cols) * 4);
      return;
    case WeightFormat::kFP8: {
      const uint8_t* p = static_cast<const uint8_t*>(m.data) + r * m.cols;
      const float s = m.row_scale[r];
      for (int64_t c = 0; c < m.cols; ++c) out[c] = e4m3_to_f32(p[c]) * s;
      return;
    }
    case WeightFormat::kCB:
      cpu::decode_cb_row(m, r, out);
      return;
  }
}

}  // namespace gridq::runtime

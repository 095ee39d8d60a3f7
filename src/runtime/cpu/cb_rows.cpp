#include "runtime/cpu/cb_rows.h"

#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"

namespace gridq::runtime::cpu {

Status check_cb(const QMatrix& m) {
  if (m.format != WeightFormat::kCB) return err("check_cb: matrix is {}, not CB", format_name(m.format));
  if (!m.rung || !m.codebook) return err("CB matrix [{}, {}] has no rung or codebook", m.rows, m.cols);
  if (m.cols % gridbook::kSuperblock != 0)
    return err("CB matrix [{}, {}]: input width is not a multiple of {}", m.rows, m.cols, gridbook::kSuperblock);
  if (m.row_bytes != gridbook::row_bytes(*m.rung, m.cols))
    return err("CB matrix [{}, {}]: row_bytes {} != {} for {}", m.rows, m.cols, m.row_bytes,
               gridbook::row_bytes(*m.rung, m.cols), m.rung->name());
  if (m.rung->grid == gridbook::Grid::FP8 && !m.row_scale)
    return err("CB matrix [{}, {}] ({}) lacks its per-row weight_scale", m.rows, m.cols, m.rung->name());
  if (m.act_bits != 4 && m.act_bits != 8 && m.act_bits != 16)
    return err("CB matrix [{}, {}]: act_bits {} is not 4, 8 or 16", m.rows, m.cols, m.act_bits);
  return {};
}

void decode_cb_row(const QMatrix& m, int64_t r, float* out) {
  thread_local std::vector<uint16_t> scratch;  // [cols] one decoded row, reused
  scratch.resize(static_cast<size_t>(m.cols));
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + r * m.row_bytes;
  const float s = m.row_scale ? m.row_scale[r] : 0.0f;
  gridbook::decode_row(*m.rung, *m.codebook, row, m.cols, s, scratch.data());
  for (int64_t c = 0; c < m.cols; ++c) out[c] = bf16_to_f32(scratch[static_cast<size_t>(c)]);
}

}  // namespace gridq::runtime::cpu

// Reference decode of CB tensors to BF16 (format.md §7). Used as the oracle for the kernels and by the
// quantizer's round-trip checks; not a serving path (serving keeps weights packed, INV-1).
#include <algorithm>
#include <cmath>

#include "core/numerics.h"
#include "gridbook/codec.h"

namespace gridq::gridbook {

void decode_superblock_fp4(const Rung& r, const Codebook& cb, const uint8_t* sb,
                           uint16_t out_bf16[kSuperblock]) {
  float scales[kFp4Groups];
  superblock_scales_fp4(r, sb, scales);
  float v[kVecDim];
  for (int c = 0; c < kCodewords; ++c) {
    cb.lookup(read_code_exact(sb, c, r.k), v);
    const float s = scales[c / 2];  // codewords 2g and 2g+1 form group g
    for (int j = 0; j < kVecDim; ++j) {
      float w = v[j] * s;  // exact in FP32 (<= 6 significant bits), and exact in BF16 (§16)
      out_bf16[c * kVecDim + j] = f32_to_bf16(w);
    }
  }
}

void decode_superblock_fp8(const Rung& r, const Codebook& cb, const uint8_t* sb, float row_scale,
                           uint16_t out_bf16[kSuperblock]) {
  float v[kVecDim];
  for (int c = 0; c < kCodewords; ++c) {
    cb.lookup(read_code_exact(sb, c, r.k), v);
    for (int j = 0; j < kVecDim; ++j) {
      float w = v[j] * row_scale;                  // fl32: first rounding
      out_bf16[c * kVecDim + j] = f32_to_bf16(w);  // bf16_rn: second rounding
    }
  }
}

void decode_row(const Rung& r, const Codebook& cb, const uint8_t* row, int64_t in, float fp8_row_scale,
                uint16_t* out_bf16) {
  const int64_t n_sb = in / kSuperblock;
  const int64_t ts = r.type_size();
  for (int64_t s = 0; s < n_sb; ++s) {
    if (r.grid == Grid::FP4)
      decode_superblock_fp4(r, cb, row + s * ts, out_bf16 + s * kSuperblock);
    else
      decode_superblock_fp8(r, cb, row + s * ts, fp8_row_scale, out_bf16 + s * kSuperblock);
  }
}

Status check_fp8_row_scales(std::span<const float> weight_scale, std::string_view tensor) {
  for (size_t i = 0; i < weight_scale.size(); ++i) {
    float s = weight_scale[i];
    if (!std::isfinite(s) || !(s > 0.0f))
      return err("{}: weight_scale[{}] = {} must be finite and > 0", tensor, i, s);
  }
  return {};
}

Status decode_tensor(const Rung& r, const Codebook& cb, std::string_view tensor,
                     std::span<const uint8_t> qweight, std::span<const int64_t> shape, int64_t in,
                     std::span<const float> weight_scale, std::span<uint16_t> out) {
  GRIDQ_RETURN_IF_ERROR(validate_rung(r));
  if (cb.rung != r) return err("{}: codebook is for rung {}, tensor is {}", tensor, cb.rung.name(), r.name());
  if (shape.size() != 2 && shape.size() != 3)
    return err("{}: cb_qweight must be 2-D [rows, bytes] or 3-D [E, rows, bytes], got {} dims", tensor,
               shape.size());
  if (in <= 0 || in % kSuperblock != 0)
    return err("{}: in_features {} is not a positive multiple of {} (CB needs whole superblocks)", tensor, in,
               kSuperblock);
  for (int64_t d : shape)
    if (d < 0) return err("{}: negative dimension in cb_qweight shape", tensor);
  const int64_t experts = shape.size() == 3 ? shape[0] : 1;
  const int64_t rows = shape[shape.size() - 2];
  const int64_t rb = row_bytes(r, in);
  if (shape.back() != rb)
    return err("{}: cb_qweight last dim {} != (in/256)·type_size = ({}/256)·{} = {} for {}", tensor,
               shape.back(), in, r.type_size(), rb, r.name());
  const int64_t total_rows = experts * rows;
  if (static_cast<int64_t>(qweight.size()) != total_rows * rb)
    return err("{}: cb_qweight holds {} bytes, shape needs {}", tensor, qweight.size(), total_rows * rb);
  if (static_cast<int64_t>(out.size()) != total_rows * in)
    return err("{}: output holds {} values, needs {}", tensor, out.size(), total_rows * in);
  if (r.grid == Grid::FP8) {
    if (static_cast<int64_t>(weight_scale.size()) != total_rows)
      return err("{}: fp8 weight_scale has {} values, needs one per output row ({})", tensor,
                 weight_scale.size(), total_rows);
    GRIDQ_RETURN_IF_ERROR(check_fp8_row_scales(weight_scale, tensor));
  } else {
    if (!weight_scale.empty()) return err("{}: fp4 rung {} takes no weight_scale tensor", tensor, r.name());
    GRIDQ_RETURN_IF_ERROR(check_scale_planes(r, qweight, tensor));
  }
  for (int64_t row = 0; row < total_rows; ++row) {
    float s = r.grid == Grid::FP8 ? weight_scale[static_cast<size_t>(row)] : 0.0f;
    decode_row(r, cb, qweight.data() + row * rb, in, s, out.data() + row * in);
  }
  return {};
}

}  // namespace gridq::gridbook

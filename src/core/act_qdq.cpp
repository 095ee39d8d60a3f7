// CPU reference of the activation contracts (format.md §14). Every FP32 operation is written as its own
// statement so that no compiler contraction (FMA) can merge two roundings the contract keeps separate.
#include "core/act_qdq.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <vector>

#include "core/numerics.h"

namespace gridq {
namespace {

constexpr uint16_t kBf16NaN = 0x7FC0;

// §14.1 step 4: 15-value E2M1 grid; exact ties go to the lower value.
constexpr float kFp4Grid[15] = {-6.0f, -4.0f, -3.0f, -2.0f, -1.5f, -1.0f, -0.5f, 0.0f,
                                0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f};

float snap_fp4(float v) {
  int i = 0;
  while (i < 15 && !(kFp4Grid[i] >= v)) ++i;
  float lo = kFp4Grid[std::max(i - 1, 0)];
  float hi = kFp4Grid[std::min(i, 14)];
  float d_hi = std::fabs(hi - v);
  float d_lo = std::fabs(v - lo);
  return d_hi < d_lo ? hi : lo;
}

}  // namespace

void qdq_fp4_group16(const uint16_t* in_bf16, uint16_t* out_bf16) {
  float x[16];
  float a = 0.0f;
  bool nan = false;
  for (int j = 0; j < 16; ++j) {
    x[j] = bf16_to_f32(in_bf16[j]);
    if (std::isnan(x[j])) nan = true;
    a = std::max(a, std::fabs(x[j]));
  }
  if (nan) {
    std::fill(out_bf16, out_bf16 + 16, kBf16NaN);
    return;
  }
  // The reference multiplies by the rounded reciprocal fl32(1/6) = 0x3E2AAAAB; it does not divide by 6.
  const float kRecip6 = std::bit_cast<float>(0x3E2AAAABu);
  const float kFloor = 1e-8f;
  float s = std::max(a, kFloor) * kRecip6;
  for (int j = 0; j < 16; ++j) {
    float v = x[j] / s;  // a true IEEE division
    float q = snap_fp4(v);
    float y = q * s;
    out_bf16[j] = f32_to_bf16(y);
  }
}

Status qdq_fp4_row(std::span<const uint16_t> in, std::span<uint16_t> out) {
  if (in.size() % 16 != 0) return err("fp4 activation qdq: row length {} is not a multiple of 16", in.size());
  if (out.size() != in.size())
    return err("fp4 activation qdq: output length {} != input length {}", out.size(), in.size());
  uint16_t tmp[16];
  for (size_t g = 0; g < in.size(); g += 16) {
    qdq_fp4_group16(in.data() + g, tmp);  // via tmp so in == out is safe
    std::copy(tmp, tmp + 16, out.data() + g);
  }
  return {};
}

Status qdq_fp4_row_f32(std::span<const float> in, std::span<float> out) {
  if (in.size() % 16 != 0) return err("fp4 activation qdq: row length {} is not a multiple of 16", in.size());
  if (out.size() != in.size())
    return err("fp4 activation qdq: output length {} != input length {}", out.size(), in.size());
  uint16_t a[16], b[16];
  for (size_t g = 0; g < in.size(); g += 16) {
    for (int j = 0; j < 16; ++j) a[j] = f32_to_bf16(in[g + j]);
    qdq_fp4_group16(a, b);
    for (int j = 0; j < 16; ++j) out[g + j] = bf16_to_f32(b[j]);
  }
  return {};
}

float fp8_token_scale(float absmax) {
  const float kRecip448 = 1.0f / 448.0f;  // fl32(1/448), folded at compile time
  const float kFloor = 1.0f / 229376.0f;  // = 2^-15 / 7, fl32
  float s = absmax * kRecip448;
  if (std::isnan(s)) return s;
  return std::max(s, kFloor);
}

namespace {

// x: the row already widened from BF16.
template <typename Get>
float quantize_fp8_impl(size_t n, Get get, uint8_t* q) {
  float a = 0.0f;
  bool nan = false;
  for (size_t k = 0; k < n; ++k) {
    float x = get(k);
    if (std::isnan(x)) nan = true;
    a = std::max(a, std::fabs(x));
  }
  float s = nan ? std::bit_cast<float>(0x7FC00000u) : fp8_token_scale(a);
  for (size_t k = 0; k < n; ++k) {
    float v = get(k) / s;
    q[k] = f32_to_e4m3_sat(v);  // NaN -> 0x7F
  }
  return s;
}

}  // namespace

float quantize_fp8_token_row(std::span<const uint16_t> in, std::span<uint8_t> q_out) {
  assert(q_out.size() >= in.size());
  return quantize_fp8_impl(
      in.size(), [&](size_t k) { return bf16_to_f32(in[k]); }, q_out.data());
}

float quantize_fp8_token_row_f32(std::span<const float> in, std::span<uint8_t> q_out) {
  assert(q_out.size() >= in.size());
  return quantize_fp8_impl(
      in.size(), [&](size_t k) { return bf16_round(in[k]); }, q_out.data());
}

Status qdq_fp8_token_row(std::span<const uint16_t> in, std::span<uint16_t> out) {
  if (out.size() != in.size())
    return err("fp8 activation qdq: output length {} != input length {}", out.size(), in.size());
  std::vector<uint8_t> q(in.size());
  float s = quantize_fp8_token_row(in, q);
  for (size_t k = 0; k < in.size(); ++k) {
    float y = e4m3_to_f32(q[k]) * s;
    out[k] = f32_to_bf16(y);
  }
  return {};
}

Status qdq_fp8_token_row_f32(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size())
    return err("fp8 activation qdq: output length {} != input length {}", out.size(), in.size());
  std::vector<uint8_t> q(in.size());
  float s = quantize_fp8_token_row_f32(in, q);
  for (size_t k = 0; k < in.size(); ++k) {
    float y = e4m3_to_f32(q[k]) * s;
    out[k] = bf16_to_f32(f32_to_bf16(y));
  }
  return {};
}

}  // namespace gridq

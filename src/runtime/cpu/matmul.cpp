#include "runtime/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <span>
#include <vector>

#include "core/act_qdq.h"
#include "core/numerics.h"
#include "runtime/cpu/cb_rows.h"

namespace gridq::runtime::cpu {

// Multiversioned kernels have external linkage: ifunc resolvers and internal linkage do not mix on every
// toolchain.
constexpr int kLanes = 16;
constexpr int64_t kRowBlock = 4;  // weight rows widened to fp32 together, then reused for every token
constexpr int64_t kFusedMaxTokens = 4;  // below this many tokens BF16 rows are not widened first

// Same operations in every clone (no FMA: avx2 does not imply it), so the clones give identical bits.
__attribute__((target_clones("avx2", "default"))) float cpu_dot_impl(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// BF16 row times fp32 vector without the widened copy: the same products in the same order as
// cpu_dot_impl on the widened row (widening is exact), so either path gives identical bits.
__attribute__((target_clones("avx2", "default"))) float cpu_dot_bf16(const uint16_t* w, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += std::bit_cast<float>(static_cast<uint32_t>(w[i + j]) << 16) * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += std::bit_cast<float>(static_cast<uint32_t>(w[i]) << 16) * b[i];
  for (int k = kLanes / 2; k > 0; k /= 2)
    for (int j = 0; j < k; ++j) acc[j] += acc[j + k];
  return acc[0];
}

__attribute__((target_clones("avx2", "default"))) void cpu_widen_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t c = 0; c < n; ++c) out[c] = std::bit_cast<float>(static_cast<uint32_t>(in[c]) << 16);
}

namespace {

// Row r as fp32 for the product; FP8 W8A8 rows stay unscaled (the scale goes into the epilogue).
void row_f32(const QMatrix& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::kBF16:
      cpu_widen_bf16(static_cast<const uint16_t*>(w.data) + r * w.cols, out, w.cols);
      return;
    case WeightFormat::kFP8: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(p[c]);
      return;
    }
    default:
      dequantize_row(w, r, out);
  }
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) { return cpu_dot_impl(a, b, n); }

void matmul(const QMatrix& w, const float* x, int64_t T, float* y) {
  const int64_t R = w.rows, C = w.cols;
  if (T <= 0 || R <= 0) return;
  // Activation contract, per token.
  std::vector<float> xq;
  std::vector<float> tok_scale;
  const float* xa = x;
  if (w.format == WeightFormat::kFP8) {
    xq.resize(static_cast<size_t>(T * C));
    tok_scale.resize(static_cast<size_t>(T));
    std::vector<uint8_t> codes(static_cast<size_t>(C));
    for (int64_t t = 0; t < T; ++t) {
      tok_scale[static_cast<size_t>(t)] =
          quantize_fp8_token_row_f32(std::span<const float>(x + t * C, static_cast<size_t>(C)), codes);
      for (int64_t c = 0; c < C; ++c) xq[static_cast<size_t>(t * C + c)] = e4m3_to_f32(codes[static_cast<size_t>(c)]);
    }
    xa = xq.data();
  } else if (w.act_bits == 8 || w.act_bits == 4) {
    xq.resize(static_cast<size_t>(T * C));
    for (int64_t t = 0; t < T; ++t) {
      std::span<const float> in(x + t * C, static_cast<size_t>(C));
      std::span<float> out(xq.data() + t * C, static_cast<size_t>(C));
      Status st = w.act_bits == 8 ? qdq_fp8_token_row_f32(in, out) : qdq_fp4_row_f32(in, out);
      (void)st;  // sizes are equal by construction; C % 16 is checked when the matrix is built
    }
    xa = xq.data();
  }
  const int64_t nblocks = (R + kRowBlock - 1) / kRowBlock;
  const bool parallel = R * C * std::max<int64_t>(T, 1) >= (1 << 15) && nblocks > 1;
#pragma omp parallel if (parallel)
  {
    std::vector<float> wrow(static_cast<size_t>(kRowBlock * C));  // [kRowBlock, C]
#pragma omp for schedule(static)
    for (int64_t rb = 0; rb < nblocks; ++rb) {
      const int64_t r0 = rb * kRowBlock;
      const int64_t nr = std::min(kRowBlock, R - r0);
      if (w.format == WeightFormat::kBF16 && T < kFusedMaxTokens) {
        // Decode: few tokens, so read each BF16 row straight from the weights.
        const uint16_t* wb = static_cast<const uint16_t*>(w.data);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < nr; ++i) y[t * R + r0 + i] = cpu_dot_bf16(wb + (r0 + i) * C, xa + t * C, C);
        continue;
      }
      for (int64_t i = 0; i < nr; ++i) row_f32(w, r0 + i, wrow.data() + i * C);
      for (int64_t t = 0; t < T; ++t) {
        const float* xt = xa + t * C;
        float* yt = y + t * R + r0;
        for (int64_t i = 0; i < nr; ++i) yt[i] = cpu_dot_impl(wrow.data() + i * C, xt, C);
        if (w.format == WeightFormat::kFP8)
          for (int64_t i = 0; i < nr; ++i)
            yt[i] = bf16_round(tok_scale[static_cast<size_t>(t)] * w.row_scale[r0 + i] * yt[i]);
      }
    }
  }
}

}  // namespace gridq::runtime::cpu

#include "quant/fp8_weights.h"

#include <cmath>

#include "core/numerics.h"
#include "gridbook/rung.h"
#include "quant/cb_gptq.h"
#include "quant/dense_book.h"
#include "quant/grid_values.h"
#include "quant/hessian_factor.h"

namespace gridq::quant {
namespace {

Status check_weight(const float* W, int R, int C) {
  if (R <= 0 || C <= 0) return err("FP8 weight [{}, {}]: empty shape", R, C);
  for (int64_t i = 0; i < int64_t(R) * C; ++i)
    if (!std::isfinite(W[i])) return err("FP8 weight: element ({}, {}) is not finite", i / C, i % C);
  return Status();
}

std::vector<float> channel_scales(const float* W, int R, int C) {
  std::vector<float> s(R);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; ++r) {
    float amax = 0.0f;
    for (int j = 0; j < C; ++j) amax = std::max(amax, std::fabs(W[size_t(r) * C + j]));
    s[r] = amax == 0.0f ? 1.0f : amax / 448.0f;
  }
  return s;
}

// The E4M3 grid as a 1-dimensional table (gptq_core's book for FP8_DYNAMIC).
DenseBook e4m3_book() {
  DenseBook book;
  book.n_sub = 1;
  book.sub_dim = 1;
  const std::vector<float> grid = signed_grid_values(gridbook::Grid::FP8);
  book.entries = {static_cast<int>(grid.size())};
  book.t = {std::vector<double>(grid.begin(), grid.end())};
  return book;
}

// The E4M3 codes of the grid entries GPTQ chose, idx [R, C] (e4m3_book's indices).
std::vector<uint8_t> e4m3_codes(const DenseBook& book, const std::vector<uint32_t>& idx) {
  std::vector<uint8_t> q(idx.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = f32_to_e4m3_rne(static_cast<float>(book.t[0][idx[i]]));
  return q;
}

}  // namespace

Expected<Fp8Weights> quantize_fp8_per_channel(const float* W, int R, int C) {
  GRIDQ_RETURN_IF_ERROR(check_weight(W, R, C));
  Fp8Weights out;
  out.rows = R;
  out.cols = C;
  out.scale = channel_scales(W, R, C);
  out.q.resize(size_t(R) * C);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      out.q[size_t(r) * C + j] = f32_to_e4m3_rne(W[size_t(r) * C + j] / out.scale[r]);
  return out;
}

Expected<Fp8Weights> quantize_fp8_per_channel_gptq(const float* W, int R, int C, const float* H,
                                                   int64_t n_tokens, double damp, int block) {
  GRIDQ_RETURN_IF_ERROR(check_weight(W, R, C));
  if (block <= 0) return err("FP8 GPTQ: block {} must be positive", block);
  GRIDQ_ASSIGN_OR_RETURN(InverseFactor f, inverse_cholesky_upper(H, C, n_tokens, damp, 3, "H"));
  Fp8Weights out;
  out.rows = R;
  out.cols = C;
  out.scale = channel_scales(W, R, C);
  const DenseBook book = e4m3_book();
  GptqCoreSpec spec;
  spec.rows = R;
  spec.cols = C;
  spec.block = block;
  spec.bf16_decode = false;  // the served weight is e4m3 · s exactly (no BF16 rounding in between)
  auto scale_fn = [&](int b0, int b1, const double*, double* slab_scale) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < b1 - b0; ++j) slab_scale[size_t(r) * block + j] = out.scale[r];
  };
  const GptqCoreResult res = gptq_core(W, f.identity ? nullptr : f.U.data(), book, spec, scale_fn);
  out.q = e4m3_codes(book, res.sub_idx);
  return out;
}

bool fp8_gptq_on_device_covers(int C, int block) { return block == 256 && C > 0 && C % 256 == 0; }

Expected<Fp8Weights> quantize_fp8_per_channel_gptq_on_device(const float* W, int R, int C, const float* H,
                                                             int64_t n_tokens, double damp) {
  GRIDQ_RETURN_IF_ERROR(check_weight(W, R, C));
  if (!fp8_gptq_on_device_covers(C, 256))
    return err("FP8 GPTQ on the GPU: in_features {} is not a multiple of 256", C);
  Fp8Weights out;
  out.rows = R;
  out.cols = C;
  out.scale = channel_scales(W, R, C);
  const DenseBook book = e4m3_book();
  GRIDQ_ASSIGN_OR_RETURN(FixedScaleGptq g, fixed_scale_gptq_on_device(W, R, C, H, n_tokens, out.scale.data(),
                                                                      book, false, damp, 3));
  out.q = e4m3_codes(book, g.sub_idx);
  return out;
}

std::vector<float> dequantize_fp8(const Fp8Weights& w) {
  std::vector<float> out(size_t(w.rows) * w.cols);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < w.rows; ++r)
    for (int j = 0; j < w.cols; ++j)
      out[size_t(r) * w.cols + j] = e4m3_to_f32(w.q[size_t(r) * w.cols + j]) * w.scale[r];
  return out;
}

}  // namespace gridq::quant

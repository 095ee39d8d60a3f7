// FP8 W8A8 per-channel weights (quantizer.md §6): scales, RNE saturating conversion checked against
// brute-force nearest E4M3 values and format.md §2's reference points; optional GPTQ reduces to nearest and
// beats it on correlated inputs.
#include "quant/fp8_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/numerics.h"
#include "quant/cb_gptq.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

TEST(Fp8Weights, ReferencePointsAndZeroRow) {
  // Row 0 has amax 448 -> scale 1, so its bytes are the plain conversions of format.md §2.
  const int C = 8;
  std::vector<float> W = {448.0f, 1.0625f, 1.1875f, 232.0f, 440.0f, -0.0f, 0.0009765625f,
                          -3.0f,  // row 0
                          0,      0,       0,       0,      0,      0,     0,
                          0};  // row 1
  auto q = quantize_fp8_per_channel(W.data(), 2, C);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->scale[0], 1.0f);
  EXPECT_EQ(q->scale[1], 1.0f);                                                 // all-zero row
  const uint8_t expect0[C] = {0x7E, 0x38, 0x3A, 0x76, 0x7E, 0x80, 0x00, 0xC4};  // 2^-10 -> 0x00, -3 -> 0xC4
  for (int j = 0; j < C; ++j) EXPECT_EQ(q->q[j], expect0[j]) << "col " << j;
  for (int j = 0; j < C; ++j) EXPECT_EQ(q->q[C + j], 0x00);
}

TEST(Fp8Weights, NearestE4m3AgainstBruteForce) {
  const int R = 16, C = 256;
  std::vector<float> W = testing::gaussian(size_t(R) * C, 77, 0.05);
  for (int j = 0; j < C; ++j) W[j] *= 1e-6f;  // a tiny row: the per-row scale must follow its amax
  auto q = quantize_fp8_per_channel(W.data(), R, C);
  ASSERT_TRUE(q.ok()) << q.message();
  std::vector<float> vals;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7F) != 0x7F) vals.push_back(e4m3_to_f32(static_cast<uint8_t>(b)));
  for (int r = 0; r < R; ++r) {
    float amax = 0;
    for (int j = 0; j < C; ++j) amax = std::max(amax, std::fabs(W[r * C + j]));
    EXPECT_EQ(q->scale[r], amax / 448.0f);
    for (int j = 0; j < C; ++j) {
      const double x = W[r * C + j] / q->scale[r];
      double best = std::numeric_limits<double>::infinity();
      for (float v : vals) best = std::min(best, std::fabs(x - v));
      EXPECT_EQ(std::fabs(x - e4m3_to_f32(q->q[r * C + j])), best) << r << "," << j;
    }
  }
}

TEST(Fp8Weights, GptqIdentityIsNearestAndFeedbackHelps) {
  const int R = 32, C = 256;
  testing::Correlated cor(C, 500);
  const std::vector<float> X = cor.rows(1024, 501), Xh = cor.rows(256, 502);
  const std::vector<float> H = testing::gram(X, 1024, C);
  const std::vector<float> W = testing::gaussian(size_t(R) * C, 503, 0.05);
  auto rtn = quantize_fp8_per_channel(W.data(), R, C);
  ASSERT_TRUE(rtn.ok());
  std::vector<float> I(size_t(C) * C, 0.0f);
  for (int i = 0; i < C; ++i) I[size_t(i) * C + i] = 1.0f;
  auto id = quantize_fp8_per_channel_gptq(W.data(), R, C, I.data(), 100);
  ASSERT_TRUE(id.ok()) << id.message();
  EXPECT_EQ(id->q, rtn->q);  // ties (lower value vs RNE) would be documented flips; none on random data
  EXPECT_EQ(id->scale, rtn->scale);
  auto g = quantize_fp8_per_channel_gptq(W.data(), R, C, H.data(), 1024);
  ASSERT_TRUE(g.ok()) << g.message();
  const std::vector<float> wr = dequantize_fp8(*rtn), wg = dequantize_fp8(*g);
  const double mr = holdout_output_mse(Xh.data(), 256, W.data(), wr.data(), R, C);
  const double mg = holdout_output_mse(Xh.data(), 256, W.data(), wg.data(), R, C);
  std::printf("FP8_DYNAMIC weights held-out output-MSE: RTN %.6g, GPTQ %.6g, ratio %.4f\n", mr, mg, mg / mr);
  EXPECT_LT(mg, 0.9 * mr);
}

TEST(Fp8Weights, RefusesNonFinite) {
  std::vector<float> W(4, 1.0f);
  W[2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(quantize_fp8_per_channel(W.data(), 1, 4).ok());
}

}  // namespace
}  // namespace gridq::quant

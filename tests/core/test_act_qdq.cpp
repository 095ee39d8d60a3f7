// Activation contracts (format.md §14) against an independent double-precision reference and the §17.7 /
// §17.8 vectors. In the reference, every FP32 rounding the contract requires is an explicit
// static_cast<float> of an exact double result (a double +,×,÷ of two floats, rounded once to float, is the
// correctly rounded float result).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/act_qdq.h"
#include "core/numerics.h"

namespace gridq {
namespace {

uint16_t bf(float f) { return f32_to_bf16(f); }
float fb(uint16_t h) { return bf16_to_f32(h); }

// Independent BF16 rounding: nearest of the two BF16 neighbours in double, ties to the even pattern.
uint16_t ref_bf16(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  uint32_t sign = b & 0x80000000u;
  uint32_t lo = (b & 0x7FFFFFFFu) >> 16;
  double ax = std::fabs(static_cast<double>(x));
  double vlo = std::bit_cast<float>(lo << 16);
  if (vlo == ax) return static_cast<uint16_t>(lo | (sign >> 16));
  double vhi = std::bit_cast<float>((lo + 1) << 16);
  uint32_t r = (ax - vlo < vhi - ax) ? lo : (vhi - ax < ax - vlo) ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return static_cast<uint16_t>(r | (sign >> 16));
}

std::vector<uint16_t> ref_fp4(const std::vector<uint16_t>& in) {
  static const double kGrid[15] = {-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<uint16_t> out(in.size());
  for (size_t g = 0; g < in.size(); g += 16) {
    double a = 0;
    bool nan = false;
    for (size_t j = 0; j < 16; ++j) {
      double x = fb(in[g + j]);
      nan |= std::isnan(x);
      a = std::max(a, std::fabs(x));
    }
    if (nan) {
      for (size_t j = 0; j < 16; ++j) out[g + j] = 0x7FC0;
      continue;
    }
    float R = static_cast<float>(1.0 / 6.0);
    float s = static_cast<float>(std::max(a, static_cast<double>(static_cast<float>(1e-8))) * R);
    for (size_t j = 0; j < 16; ++j) {
      double v = static_cast<float>(fb(in[g + j]) / static_cast<double>(s));
      // Nearest grid value in exact arithmetic, exact ties to the lower value.
      double best = kGrid[0];
      for (double q : kGrid) {
        double d = std::fabs(q - v), db = std::fabs(best - v);
        if (d < db) best = q;
      }
      float y = static_cast<float>(best * s);
      out[g + j] = ref_bf16(y);
    }
  }
  return out;
}

std::vector<uint16_t> qdq4(const std::vector<uint16_t>& in) {
  std::vector<uint16_t> out(in.size());
  EXPECT_TRUE(qdq_fp4_row(in, out).ok());
  return out;
}

TEST(ActQdq, Fp4RecipConstant) {
  EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(1.0 / 6.0)), 0x3E2AAAABu);
}

TEST(ActQdq, Fp4SpecVectorsAmax6) {
  // amax 6 -> s = fl32(6 · fl32(1/6)) = 1.0, so the values below are v directly.
  std::vector<float> x = {6,  0.25f, -0.25f, 0.75f, -0.75f, 2.5f, -2.5f, 5,
                          -5, 0,     -0.0f,  1.25f, -3.5f,  0.1f, 6,     -6};
  std::vector<float> want = {6, 0, -0.5f, 0.5f, -1, 2, -3, 4, -6, 0, 0, 1, -4, 0, 6, -6};
  std::vector<uint16_t> in;
  for (float f : x) in.push_back(bf(f));
  std::vector<uint16_t> out = qdq4(in);
  for (size_t j = 0; j < 16; ++j) {
    EXPECT_EQ(fb(out[j]), want[j]) << j;
    if (want[j] == 0) {
      EXPECT_EQ(out[j], 0x0000) << "zeros are +0, index " << j;
    }
  }
  EXPECT_EQ(out, ref_fp4(in));
}

TEST(ActQdq, Fp4MultiplyByRoundedReciprocal) {
  std::vector<uint16_t> in(16, 0);
  in[0] = bf(1.7265625f);
  in[1] = bf(-0.2158203125f);
  ASSERT_EQ(fb(in[0]), 1.7265625f);
  ASSERT_EQ(fb(in[1]), -0.2158203125f);
  std::vector<uint16_t> out = qdq4(in);
  EXPECT_EQ(fb(out[1]), -0.1435546875f);  // a true division by 6 would give -0.287109375
  EXPECT_EQ(out, ref_fp4(in));
}

TEST(ActQdq, Fp4ZerosNaNAndLength) {
  std::vector<uint16_t> in(48, 0);
  for (size_t j = 16; j < 32; ++j) in[j] = 0x8000;  // a -0 group
  in[40] = bf(3.0f);
  in[33] = 0x7FC1;  // NaN in group 2 only
  std::vector<uint16_t> out = qdq4(in);
  for (size_t j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0x0000) << j;
  for (size_t j = 32; j < 48; ++j) EXPECT_TRUE(std::isnan(fb(out[j]))) << j;
  in[33] = 0;
  in[5] = 0xFF80 | 0x1;  // NaN poisons group 0 only; group 2 is now normal
  out = qdq4(in);
  for (size_t j = 0; j < 16; ++j) EXPECT_TRUE(std::isnan(fb(out[j]))) << j;
  EXPECT_EQ(fb(out[40]), 3.0f);
  std::vector<uint16_t> bad(30), bad_out(30);
  Status st = qdq_fp4_row(bad, bad_out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("30"), std::string::npos);
  std::vector<uint16_t> short_out(16);
  EXPECT_FALSE(qdq_fp4_row(std::vector<uint16_t>(32), short_out).ok());
}

TEST(ActQdq, Fp4RandomAgainstReference) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int t = 0; t < 200; ++t) {
    std::vector<uint16_t> in(256);
    float scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    for (auto& h : in) h = bf(nd(rng) * scale);
    if (t % 4 == 0) {  // exact grid midpoints after division by s = 1
      in[0] = bf(6.0f);
      for (size_t j = 1; j < 16; ++j)
        in[j] = bf(static_cast<float>(static_cast<int>(rng() % 24) - 12) * 0.25f);
    }
    std::vector<uint16_t> out = qdq4(in);
    ASSERT_EQ(out, ref_fp4(in)) << t;
    // In place gives the same result; the f32 variant agrees after widening.
    std::vector<uint16_t> inplace = in;
    ASSERT_TRUE(qdq_fp4_row(inplace, inplace).ok());
    ASSERT_EQ(inplace, out);
    std::vector<float> xf(in.size()), yf(in.size());
    for (size_t j = 0; j < in.size(); ++j) xf[j] = fb(in[j]);
    ASSERT_TRUE(qdq_fp4_row_f32(xf, yf).ok());
    for (size_t j = 0; j < in.size(); ++j)
      ASSERT_EQ(std::bit_cast<uint32_t>(yf[j]), std::bit_cast<uint32_t>(fb(out[j])));
  }
}

// ---- FP8 per token ----

uint8_t ref_e4m3(double v) {  // nearest E4M3 of a clamped value, ties to even byte
  double av = std::min(std::fabs(v), 448.0);
  uint32_t best = 0;
  double bd = INFINITY;
  for (uint32_t b = 0; b <= 0x7E; ++b) {
    uint32_t e = b >> 3, m = b & 7;
    double val =
        e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 7);
    double d = std::fabs(val - av);
    if (d < bd || (d == bd && (b & 1) == 0)) {
      bd = d;
      best = b;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 0x80 : 0));
}

std::vector<uint16_t> ref_fp8(const std::vector<uint16_t>& in, float* s_out) {
  double a = 0;
  for (uint16_t h : in) a = std::max(a, std::fabs(static_cast<double>(fb(h))));
  float r448 = static_cast<float>(1.0 / 448.0);
  float s = std::max(static_cast<float>(a * r448), static_cast<float>(1.0 / 229376.0));
  *s_out = s;
  std::vector<uint16_t> out;
  for (uint16_t h : in) {
    float v = static_cast<float>(fb(h) / static_cast<double>(s));
    uint8_t q = ref_e4m3(v);
    out.push_back(ref_bf16(static_cast<float>(static_cast<double>(e4m3_to_f32(q)) * s)));
  }
  return out;
}

TEST(ActQdq, Fp8SpecVectors) {
  // All-zero row: s = fl32(1/229376), outputs +0; -0 preserved.
  std::vector<uint16_t> in = {0, 0x8000, 0, 0};
  std::vector<uint16_t> out(4);
  std::vector<uint8_t> q(4);
  EXPECT_EQ(quantize_fp8_token_row(in, q), static_cast<float>(1.0 / 229376.0));
  ASSERT_TRUE(qdq_fp8_token_row(in, out).ok());
  EXPECT_EQ(out, (std::vector<uint16_t>{0, 0x8000, 0, 0}));
  EXPECT_EQ(q[1], 0x80);

  // amax 448: the row's extremes stay ±448.
  in = {bf(448.0f), bf(-448.0f), bf(-0.0f), bf(1.0625f)};
  float s_ref = 0;
  std::vector<uint16_t> want = ref_fp8(in, &s_ref);
  ASSERT_TRUE(qdq_fp8_token_row(in, out).ok());
  EXPECT_EQ(out, want);
  EXPECT_EQ(fb(out[0]), 448.0f);
  EXPECT_EQ(fb(out[1]), -448.0f);
  EXPECT_EQ(out[2], 0x8000);
  EXPECT_EQ(quantize_fp8_token_row(in, q), s_ref);

  // A value on an E4M3 midpoint: with s = 1 exactly (amax = 448 and fl32(448·fl32(1/448)) = 1 when it is),
  // 1.0625 lies halfway between 1 (0x38) and 1.125 (0x39) and goes to the even byte 0x38.
  if (s_ref == 1.0f) {
    EXPECT_EQ(q[3], 0x38);
    EXPECT_EQ(fb(out[3]), 1.0f);
  } else {
    EXPECT_EQ(q[3], ref_e4m3(static_cast<float>(1.0625 / s_ref)));
  }
}

TEST(ActQdq, Fp8MidpointWithUnitScale) {
  // Pick amax so that s is exactly 1: a = 448 gives s = fl32(448·fl32(1/448)); check the midpoint rule on
  // whatever s results by comparing with the reference, and additionally on an exact power-of-two scale.
  std::vector<uint16_t> in = {bf(224.0f), bf(1.1875f), bf(-1.1875f),
                              bf(232.0f)};  // s = fl32(224/448·...) ~ 0.5
  float s_ref = 0;
  std::vector<uint16_t> want = ref_fp8(in, &s_ref);
  std::vector<uint16_t> out(4);
  ASSERT_TRUE(qdq_fp8_token_row(in, out).ok());
  EXPECT_EQ(out, want);
}

TEST(ActQdq, Fp8RandomAgainstReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int t = 0; t < 200; ++t) {
    std::vector<uint16_t> in(192);
    float scale = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
    for (auto& h : in) h = bf(nd(rng) * scale);
    if (t % 5 == 0) in[3] = 0x8000;
    float s_ref = 0;
    std::vector<uint16_t> want = ref_fp8(in, &s_ref);
    std::vector<uint16_t> out(in.size());
    ASSERT_TRUE(qdq_fp8_token_row(in, out).ok());
    ASSERT_EQ(out, want) << t;
    std::vector<uint8_t> q(in.size());
    ASSERT_EQ(quantize_fp8_token_row(in, q), s_ref);
    for (size_t k = 0; k < in.size(); ++k)
      ASSERT_EQ(q[k], ref_e4m3(static_cast<float>(fb(in[k]) / static_cast<double>(s_ref)))) << k;
    std::vector<float> xf(in.size()), yf(in.size());
    for (size_t k = 0; k < in.size(); ++k) xf[k] = fb(in[k]);
    ASSERT_TRUE(qdq_fp8_token_row_f32(xf, yf).ok());
    for (size_t k = 0; k < in.size(); ++k) ASSERT_EQ(f32_to_bf16(yf[k]), out[k]);
  }
  std::vector<uint16_t> out(3);
  EXPECT_FALSE(qdq_fp8_token_row(std::vector<uint16_t>(4), out).ok());
}

TEST(ActQdq, Fp8NaNPoisonsRow) {
  std::vector<uint16_t> in = {bf(1.0f), 0x7FC0, bf(2.0f)};
  std::vector<uint16_t> out(3);
  ASSERT_TRUE(qdq_fp8_token_row(in, out).ok());
  for (uint16_t h : out) EXPECT_TRUE(std::isnan(fb(h)));
}

}  // namespace
}  // namespace gridq

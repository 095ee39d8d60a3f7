// Scalar format conversions against independent references: formula-based decoders in double and
// nearest-value searches over exhaustively enumerated value sets (ties resolved to the even bit pattern).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/numerics.h"

namespace gridq {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// Generic IEEE-style decoder in double: sign, `eb` exponent bits, `mb` mantissa bits, with inf/NaN at the
// all-ones exponent (ieee = true) or not.
double decode_ieee(uint32_t b, int eb, int mb) {
  uint32_t sign = (b >> (eb + mb)) & 1;
  uint32_t e = (b >> mb) & ((1u << eb) - 1);
  uint32_t m = b & ((1u << mb) - 1);
  int bias = (1 << (eb - 1)) - 1;
  double v;
  if (e == (1u << eb) - 1) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - mb);
  } else {
    v = std::ldexp(static_cast<double>(m + (1u << mb)), static_cast<int>(e) - bias - mb);
  }
  return sign ? -v : v;
}

// Nearest value of `x` in a sorted list of non-negative values (with their patterns); ties to even pattern.
// `overflow_value` is the value of the next step after the largest (unbounded exponent rule), mapped to
// `overflow_pattern`.
struct Candidate {
  double value;
  uint32_t pattern;
};
uint32_t nearest_even(double ax, const std::vector<Candidate>& pos) {
  auto it =
      std::lower_bound(pos.begin(), pos.end(), ax, [](const Candidate& c, double v) { return c.value < v; });
  if (it == pos.end()) return pos.back().pattern;
  if (it->value == ax || it == pos.begin()) return it->pattern;
  const Candidate& hi = *it;
  const Candidate& lo = *(it - 1);
  double dh = hi.value - ax, dl = ax - lo.value;
  if (dl < dh) return lo.pattern;
  if (dh < dl) return hi.pattern;
  return (lo.pattern & 1) == 0 ? lo.pattern : hi.pattern;
}

std::vector<float> edge_and_random_floats(size_t n_random) {
  std::vector<float> v;
  std::mt19937 rng(1234);
  for (size_t i = 0; i < n_random; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  for (uint32_t b :
       {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x3F800000u, 0x7F7FFFFFu,
        0x7F800000u, 0xFF800000u, 0x7F7F8000u, 0x7F7F7FFFu, 0x7F7FC000u, 0x477FE000u, 0x477FF000u,
        0x477FEFFFu, 0x47800000u, 0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u, 0x32FFFFFFu,
        0x337FFFFFu, 0x33800000u, 0x33C00000u, 0x43E00000u, 0x43E80000u, 0x43F00000u})
    v.push_back(from_bits(b));
  // Exact midpoints and neighbours for BF16 at many exponents.
  for (int i = 0; i < 20000; ++i) {
    uint32_t b = (static_cast<uint32_t>(rng()) & 0xFFFF0000u) | 0x8000u;
    v.push_back(from_bits(b));
    v.push_back(from_bits(b + 1));
    v.push_back(from_bits(b - 1));
  }
  return v;
}

TEST(Numerics, Bf16AllPatternsRoundTripAndDecode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    double ref = decode_ieee(h, 8, 7);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      uint16_t back = f32_to_bf16(f);
      ASSERT_TRUE(std::isnan(bf16_to_f32(back))) << h;
      ASSERT_EQ(back, h | 0x0040u) << h;  // quiet bit set, payload and sign kept
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    ASSERT_EQ(f32_to_bf16(f), h) << h;
  }
}

TEST(Numerics, F32ToBf16RneAgainstIntegerReference) {
  for (float x : edge_and_random_floats(1 << 20)) {
    uint32_t b = bits(x);
    uint16_t got = f32_to_bf16(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(got)));
      continue;
    }
    // Reference: the two neighbours truncate(x) and truncate(x)+1ulp, distances exact in double; the value
    // after the largest finite BF16 is 2^128 (inf), per IEEE overflow rounding.
    uint32_t sign = b & 0x80000000u;
    uint32_t abs = b & 0x7FFFFFFFu;
    uint16_t lo = static_cast<uint16_t>(abs >> 16);
    uint16_t hi = static_cast<uint16_t>(lo + 1);
    uint16_t want;
    if (abs == (static_cast<uint32_t>(lo) << 16) || abs == 0x7F800000u) {
      want = lo;
    } else {
      double ax = std::fabs(static_cast<double>(x));
      double vlo = decode_ieee(lo, 8, 7);
      double vhi = hi == 0x7F80 ? std::ldexp(1.0, 128) : decode_ieee(hi, 8, 7);
      double dl = ax - vlo, dh = vhi - ax;
      want = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
    }
    want = static_cast<uint16_t>(want | (sign >> 16));
    ASSERT_EQ(got, want) << std::hex << b;
  }
}

TEST(Numerics, F16AllPatternsRoundTripAndDecode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    double ref = decode_ieee(h, 5, 10);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(Numerics, F32ToF16RneAgainstEnumeration) {
  std::vector<Candidate> pos;
  for (uint32_t h = 0; h < 0x7C00; ++h) pos.push_back({decode_ieee(h, 5, 10), h});
  pos.push_back({65536.0, 0x7C00});  // next step after 65504: overflow to inf at and above 65520
  std::mt19937 rng(77);
  std::vector<float> xs = edge_and_random_floats(1 << 18);
  // Concentrate on the f16 range, including exact f16 midpoints.
  for (int i = 0; i < 200000; ++i) {
    int e = static_cast<int>(rng() % 44) - 28;
    xs.push_back(std::ldexp(1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f, e));
    uint32_t h = static_cast<uint32_t>(rng() % 0x7BFF);
    xs.push_back(static_cast<float>((decode_ieee(h, 5, 10) + decode_ieee(h + 1, 5, 10)) / 2));
  }
  for (float x : xs) {
    uint16_t got = f32_to_f16(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(got)));
      continue;
    }
    uint32_t want = std::isinf(x) ? 0x7C00u : nearest_even(std::fabs(static_cast<double>(x)), pos);
    want |= std::signbit(x) ? 0x8000u : 0u;
    ASSERT_EQ(got, want) << std::hex << bits(x);
  }
}

std::vector<Candidate> e4m3_positive() {
  std::vector<Candidate> pos;
  for (uint32_t b = 0; b <= 0x7E; ++b) {
    uint32_t e = b >> 3, m = b & 7;
    double v =
        e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 7);
    pos.push_back({v, b});
  }
  return pos;
}

TEST(Numerics, E4m3AllBytesDecode) {
  std::vector<Candidate> pos = e4m3_positive();
  for (uint32_t b = 0; b < 256; ++b) {
    float f = e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    double want = pos[b & 0x7F].value * ((b & 0x80) ? -1 : 1);
    EXPECT_EQ(static_cast<double>(f), want) << b;
    EXPECT_EQ(std::signbit(f), (b & 0x80) != 0) << b;
  }
  EXPECT_EQ(e4m3_to_f32(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  int positive_finite = 0;
  for (const Candidate& c : pos) positive_finite += c.value > 0;
  EXPECT_EQ(positive_finite, 126);
}

TEST(Numerics, E4m3RneSpecCases) {
  EXPECT_EQ(f32_to_e4m3_rne(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3_rne(1.1875f), 0x3A);
  EXPECT_EQ(f32_to_e4m3_rne(232.0f), 0x76);
  EXPECT_EQ(f32_to_e4m3_rne(440.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3_rne(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3_rne(1.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(f32_to_e4m3_rne(2.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(f32_to_e4m3_rne(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3_rne(NAN), 0x7F);
  // Saturation policy: everything above 448 (inf included) becomes ±448.
  EXPECT_EQ(f32_to_e4m3_rne(464.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3_rne(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3_rne(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3_sat(-1e9f), 0xFE);
  EXPECT_EQ(f32_to_e4m3_sat(500.0f), 0x7E);
}

TEST(Numerics, E4m3RneAgainstNearestEven) {
  std::vector<Candidate> pos = e4m3_positive();
  std::mt19937 rng(99);
  std::vector<float> xs;
  for (int i = 0; i < 400000; ++i) {
    float mant = 1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f;
    int e = static_cast<int>(rng() % 24) - 14;  // 2^-14 .. 2^9
    xs.push_back(std::ldexp(mant, e) * ((rng() & 1) ? -1.0f : 1.0f));
  }
  for (size_t i = 0; i + 1 < pos.size(); ++i) {  // every midpoint and its neighbours
    float mid = static_cast<float>((pos[i].value + pos[i + 1].value) / 2);
    xs.push_back(mid);
    xs.push_back(std::nextafter(mid, 0.0f));
    xs.push_back(std::nextafter(mid, 1000.0f));
    xs.push_back(-mid);
    xs.push_back(static_cast<float>(pos[i].value));
  }
  for (float x : xs) {
    double ax = std::min(std::fabs(static_cast<double>(x)), 448.0);
    uint32_t want = nearest_even(ax, pos) | (std::signbit(x) ? 0x80u : 0u);
    ASSERT_EQ(f32_to_e4m3_rne(x), want) << x;
    ASSERT_EQ(f32_to_e4m3_sat(x), want) << x;
  }
}

TEST(Numerics, E2m1CodesAndRne) {
  const uint16_t kBf16[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
  std::vector<Candidate> pos;
  for (uint32_t c = 0; c < 16; ++c) {
    // Independent formula: s · e1e0 · m; e > 0: (1 + m/2)·2^(e−1); e = 0: m/2.
    uint32_t s = c >> 3, e = (c >> 1) & 3, m = c & 1;
    double v = e ? (1 + m / 2.0) * std::ldexp(1.0, static_cast<int>(e) - 1) : m / 2.0;
    if (s) v = -v;
    float f = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(f), v) << c;
    EXPECT_EQ(std::signbit(f), s != 0) << c;
    EXPECT_EQ(f32_to_bf16(f), static_cast<uint16_t>(kBf16[c & 7] | (s << 15))) << c;
    EXPECT_EQ(f32_to_e2m1_rne(f), c) << c;
    if (!s) pos.push_back({v, c});
  }
  std::mt19937 rng(5);
  std::vector<float> xs = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, 100.0f, 1e-30f, -0.25f, -5.0f};
  for (int i = 0; i < 100000; ++i) xs.push_back((static_cast<float>(rng() % 20000) - 10000.0f) / 1024.0f);
  for (float x : xs) {
    double ax = std::min(std::fabs(static_cast<double>(x)), 6.0);
    uint32_t want = nearest_even(ax, pos) | (std::signbit(x) ? 8u : 0u);
    ASSERT_EQ(f32_to_e2m1_rne(x), want) << x;
  }
}

TEST(Numerics, E8m0) {
  for (uint32_t e = 0; e < 255; ++e) {
    float f = e8m0_to_f32(static_cast<uint8_t>(e));
    EXPECT_EQ(static_cast<double>(f), std::ldexp(1.0, static_cast<int>(e) - 127)) << e;
    if (e >= 1) {
      EXPECT_EQ(bits(f), e << 23) << e;
      EXPECT_EQ(f32_to_bf16(f), static_cast<uint16_t>(e << 7)) << e;
    }
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

}  // namespace
}  // namespace gridq

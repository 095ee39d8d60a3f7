// Index-stream packing (format.md §5, §8, §17.4) checked against a bit-by-bit reader written here.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "gridbook/packing.h"

namespace gridq::gridbook {
namespace {

// Stream bit i is bit (i mod 8) of byte floor(i/8); codeword c is bits [c·k, c·k+k), LSB first.
uint64_t read_bits(const uint8_t* p, int c, int k) {
  uint64_t v = 0;
  for (int j = 0; j < k; ++j) {
    int i = c * k + j;
    v |= static_cast<uint64_t>((p[i / 8] >> (i % 8)) & 1) << j;
  }
  return v;
}

TEST(CodecPacking, WorkedExampleK13) {
  std::vector<uint64_t> codes(32, 0);
  codes[0] = 77 + 42 * 128;
  codes[1] = 3 + 60 * 128;
  ASSERT_EQ(codes[0], 5453u);
  ASSERT_EQ(codes[0], 0x154Du);
  ASSERT_EQ(codes[1], 0x1E03u);
  SubSplit s;
  s.n = 2;
  s.width[0] = 7;
  s.width[1] = 6;
  s.offset[1] = 7;
  uint32_t sub[2] = {77, 42};
  EXPECT_EQ(compose_code(s, sub), 5453u);
  split_code(s, 7683, sub);
  EXPECT_EQ(sub[0], 3u);
  EXPECT_EQ(sub[1], 60u);
  std::vector<uint8_t> sb(61 + 16, 0xEE);
  pack_codes(codes, 13, sb.data());
  EXPECT_EQ(sb[0], 0x4D);
  EXPECT_EQ(sb[1], 0x75);
  EXPECT_EQ(sb[2], 0xC0);
  EXPECT_EQ(sb[3] & 0x3, 0x3);
  EXPECT_EQ(sb[3] >> 2, 0);  // the rest belongs to cw2 = 0
  for (int i = 4; i < 52; ++i) EXPECT_EQ(sb[static_cast<size_t>(i)], 0) << i;
  EXPECT_EQ(sb[52], 0xEE);  // pack_codes writes exactly 4k bytes
  EXPECT_EQ(read_code(sb.data(), 1, 13), 7683u);
  EXPECT_EQ(read_code_exact(sb.data(), 1, 13), 7683u);
  EXPECT_EQ(read_code(sb.data(), 0, 13), 5453u);
}

TEST(CodecPacking, Code197K12AtSeveralPositions) {
  // quantizer.md known answer: K12 (sub0, sub1) = (5, 3) -> code 197.
  SubSplit s;
  s.n = 2;
  s.width[0] = s.width[1] = 6;
  s.offset[1] = 6;
  uint32_t sub[2] = {5, 3};
  ASSERT_EQ(compose_code(s, sub), 197u);
  for (int k : {12, 16}) {
    for (int c : {0, 1, 2, 7, 15, 30, 31}) {
      std::vector<uint64_t> codes(32, 0);
      codes[static_cast<size_t>(c)] = 197;
      std::vector<uint8_t> sb(static_cast<size_t>(4 * k) + 16, 0);
      pack_codes(codes, k, sb.data());
      for (int d = 0; d < 32; ++d) {
        uint64_t want = d == c ? 197 : 0;
        EXPECT_EQ(read_code(sb.data(), d, k), want) << k << " " << c << " " << d;
        EXPECT_EQ(read_bits(sb.data(), d, k), want);
      }
      // The byte image: 197 << (c·k) as a little-endian bit string.
      int bit = c * k;
      for (int i = 0; i < 4 * k; ++i) {
        uint8_t want = 0;
        for (int j = 0; j < 8; ++j) {
          int sbit = 8 * i + j - bit;
          if (sbit >= 0 && sbit < 16 && ((197u >> sbit) & 1)) want |= static_cast<uint8_t>(1 << j);
        }
        ASSERT_EQ(sb[static_cast<size_t>(i)], want) << k << " " << c << " byte " << i;
      }
    }
  }
  // K16 is byte-aligned: codeword c is bytes 2c (low) and 2c+1.
  std::vector<uint64_t> codes(32, 0);
  for (int c = 0; c < 32; ++c) codes[static_cast<size_t>(c)] = 0x100u * static_cast<uint64_t>(c) + 0x5Au;
  std::vector<uint8_t> sb(64 + 16, 0);
  pack_codes(codes, 16, sb.data());
  for (int c = 0; c < 32; ++c) {
    EXPECT_EQ(sb[static_cast<size_t>(2 * c)], 0x5A);
    EXPECT_EQ(sb[static_cast<size_t>(2 * c + 1)], c);
  }
}

TEST(CodecPacking, Fp8K41CodewordSpansThreeWords) {
  const int k = 41;
  const int c = 3;  // bits [123, 164): 32-bit words 3, 4 and 5
  ASSERT_EQ((c * k) / 32, 3);
  ASSERT_EQ((c * k + k - 1) / 32, 5);
  const uint64_t code = 0x1A5A5A5A5A5ull & ((uint64_t{1} << k) - 1);
  std::vector<uint64_t> codes(32, 0);
  codes[c] = code;
  codes[c - 1] = (uint64_t{1} << k) - 1;  // all-ones neighbours must not bleed
  codes[c + 1] = (uint64_t{1} << k) - 1;
  std::vector<uint8_t> sb(4 * k + 16, 0);
  pack_codes(codes, k, sb.data());
  EXPECT_EQ(read_bits(sb.data(), c, k), code);
  EXPECT_EQ(read_code(sb.data(), c, k), code);
  EXPECT_EQ(read_code_exact(sb.data(), c, k), code);
  EXPECT_EQ(read_code(sb.data(), c - 1, k), (uint64_t{1} << k) - 1);
  EXPECT_EQ(read_code(sb.data(), c + 2, k), 0u);
}

TEST(CodecPacking, RandomRoundTripEveryK) {
  std::mt19937_64 rng(11);
  for (int k = 12; k <= 48; ++k) {
    for (int t = 0; t < 50; ++t) {
      std::vector<uint64_t> codes(32);
      for (auto& x : codes) x = rng() & ((uint64_t{1} << k) - 1);
      if (t == 0)
        for (auto& x : codes) x = (uint64_t{1} << k) - 1;
      ASSERT_TRUE(check_codes(codes, k).ok());
      std::vector<uint8_t> sb(static_cast<size_t>(4 * k) + 16, 0);
      pack_codes(codes, k, sb.data());
      uint64_t back[32];
      unpack_codes(sb.data(), k, back);
      for (int c = 0; c < 32; ++c) {
        ASSERT_EQ(read_bits(sb.data(), c, k), codes[static_cast<size_t>(c)]) << k << " " << c;
        ASSERT_EQ(read_code(sb.data(), c, k), codes[static_cast<size_t>(c)]);
        ASSERT_EQ(back[c], codes[static_cast<size_t>(c)]);
      }
      // Product split/compose round trip with ceil-first widths.
      int n = k <= 24 ? 2 : 4;
      SubSplit s;
      s.n = n;
      int acc = 0;
      for (int i = 0; i < n; ++i) {
        s.width[i] = k / n + (i < k % n);
        s.offset[i] = acc;
        acc += s.width[i];
      }
      uint32_t sub[4];
      split_code(s, codes[0], sub);
      EXPECT_EQ(compose_code(s, std::span<const uint32_t>(sub, static_cast<size_t>(n))), codes[0]);
    }
  }
}

TEST(CodecPacking, CheckCodesRefuses) {
  std::vector<uint64_t> codes(32, 0);
  codes[7] = uint64_t{1} << 16;
  Status st = check_codes(codes, 16);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("codeword 7"), std::string::npos);
  EXPECT_TRUE(check_codes(codes, 17).ok());
  EXPECT_FALSE(check_codes(std::vector<uint64_t>(31, 0), 16).ok());
}

TEST(CodecPacking, LastCodewordOfLastRowWithoutSlack) {
  // A tight heap buffer holding exactly one fp8 K48 row: read_code_exact must stay inside it (ASan checks
  // this in the sanitizer build); read_code needs the documented 7 bytes of slack and gets 16 here.
  const int k = 48;
  std::vector<uint64_t> codes(32);
  std::mt19937_64 rng(5);
  for (auto& x : codes) x = rng() & ((uint64_t{1} << k) - 1);
  auto tight = std::make_unique<uint8_t[]>(4 * k);
  pack_codes(codes, k, tight.get());
  EXPECT_EQ(read_code_exact(tight.get(), 31, k), codes[31]);
  auto slack = std::make_unique<uint8_t[]>(4 * k + 16);
  pack_codes(codes, k, slack.get());
  EXPECT_EQ(read_code(slack.get(), 31, k), codes[31]);
  for (int kk : {12, 13, 17, 24, 28, 41}) {  // every k: the window ends at most 7 bytes past the stream
    int last_start = (31 * kk) / 8;
    EXPECT_LE(last_start + 8 - 4 * kk, 7) << kk;
  }
}

}  // namespace
}  // namespace gridq::gridbook

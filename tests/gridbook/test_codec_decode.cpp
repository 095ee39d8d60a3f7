// Decode and encode of CB tensors (format.md §7, §8, §17.5), compared bit for bit with a straightforward
// decoder written here: bit-by-bit code reading, scales from their definitions in double, products in double.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"

namespace gridq::gridbook {
namespace {

const double kE2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

double e4m3_value(uint8_t b) {  // finite bytes only
  int e = (b >> 3) & 15, m = b & 7;
  double v = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (b & 0x80) ? -v : v;
}

// Independent RNE of a double that is exactly an FP32 value to BF16 bits.
uint16_t bf16_of_float(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  uint32_t lo = (b & 0x7FFFFFFFu) >> 16;
  double ax = std::fabs(static_cast<double>(f));
  double vlo = std::bit_cast<float>(lo << 16), vhi = std::bit_cast<float>((lo + 1) << 16);
  uint32_t r = ax == vlo               ? lo
               : (ax - vlo < vhi - ax) ? lo
               : (vhi - ax < ax - vlo) ? lo + 1
                                       : ((lo & 1) ? lo + 1 : lo);
  return static_cast<uint16_t>(r | ((b >> 16) & 0x8000u));
}

uint64_t read_bits(const uint8_t* p, int c, int k) {
  uint64_t v = 0;
  for (int j = 0; j < k; ++j) {
    int i = c * k + j;
    v |= static_cast<uint64_t>((p[i / 8] >> (i % 8)) & 1) << j;
  }
  return v;
}

struct Book {
  int n = 0, sub_dim = 0;
  std::vector<int> width;
  std::vector<std::vector<float>> t;
};

Book random_book(Grid grid, int k, std::mt19937& rng) {
  Book b;
  b.n = grid == Grid::FP4 ? 2 : 4;
  b.sub_dim = 8 / b.n;
  for (int i = 0; i < b.n; ++i) b.width.push_back((k + b.n - 1 - i) / b.n);
  for (int i = 0; i < b.n; ++i) {
    std::vector<float> t(static_cast<size_t>(b.sub_dim) << b.width[static_cast<size_t>(i)]);
    for (auto& v : t) {
      if (grid == Grid::FP4) {
        v = static_cast<float>(kE2m1[rng() % 8]) * ((rng() & 1) ? -1.0f : 1.0f);
      } else {
        uint8_t byte = static_cast<uint8_t>(rng() & 0xFF);
        if ((byte & 0x7F) == 0x7F) byte = 0x7E;
        v = static_cast<float>(e4m3_value(byte));
      }
    }
    b.t.push_back(std::move(t));
  }
  return b;
}

// The straightforward decoder: one weight at a time from the definitions.
std::vector<uint16_t> ref_decode(const Rung& r, const Book& b, const uint8_t* q, int64_t rows, int64_t in,
                                 const std::vector<float>& row_scale) {
  const int ts = 4 * r.k + (r.grid == Grid::FP8 ? 0 : r.layout_version == 2 ? 9 : 16);
  std::vector<uint16_t> out;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t s = 0; s < in / 256; ++s) {
      const uint8_t* sb = q + (row * (in / 256) + s) * ts;
      for (int c = 0; c < 32; ++c) {
        uint64_t code = read_bits(sb, c, r.k);
        std::vector<double> v;
        int off = 0;
        for (int i = 0; i < b.n; ++i) {
          uint64_t idx = (code >> off) & ((uint64_t{1} << b.width[static_cast<size_t>(i)]) - 1);
          off += b.width[static_cast<size_t>(i)];
          for (int j = 0; j < b.sub_dim; ++j)
            v.push_back(b.t[static_cast<size_t>(i)]
                           [idx * static_cast<uint64_t>(b.sub_dim) + static_cast<uint64_t>(j)]);
        }
        for (int j = 0; j < 8; ++j) {
          uint16_t w;
          if (r.grid == Grid::FP4) {
            int g = (8 * c + j) / 16;
            double scale;
            if (r.layout_version == 1) {
              scale = e4m3_value(sb[4 * r.k + g]);
            } else {
              int E = sb[4 * r.k];
              int code4 = (sb[4 * r.k + 1 + g / 2] >> (4 * (g % 2))) & 15;
              scale = (1 + (code4 % 8) / 8.0) * (code4 >= 8 ? 2 : 1) * std::ldexp(1.0, E - 127);
            }
            double p = v[static_cast<size_t>(j)] * scale;  // exact in BF16 (§16)
            float pf = static_cast<float>(p);
            EXPECT_EQ(static_cast<double>(pf), p);
            w = bf16_of_float(pf);
            EXPECT_EQ(static_cast<double>(bf16_to_f32(w)), p);
          } else {
            float p = static_cast<float>(v[static_cast<size_t>(j)] *
                                         static_cast<double>(row_scale[static_cast<size_t>(row)]));
            w = bf16_of_float(p);
          }
          out.push_back(w);
        }
      }
    }
  }
  return out;
}

TEST(CodecDecode, WorkedExampleK13V2) {
  Rung r{Grid::FP4, Mode::Product, 13, 2};
  std::vector<float> sub0(128 * 4, 0.0f), sub1(64 * 4, 0.0f);
  const float e0[4] = {1, -0.5f, 0, 3}, e1[4] = {-6, 1.5f, 2, -1};
  for (int j = 0; j < 4; ++j) {
    sub0[77 * 4 + j] = e0[j];
    sub1[42 * 4 + j] = e1[j];
  }
  auto cb = Codebook::from_tables(r, {sub0, sub1});
  ASSERT_TRUE(cb.ok()) << cb.message();
  std::vector<uint64_t> codes(32, 0);
  codes[0] = 5453;
  codes[1] = 7683;
  uint8_t c[16];
  for (auto& x : c) x = 0;
  c[0] = 0xB;
  c[1] = 0x3;
  std::vector<uint8_t> q(61);
  ASSERT_TRUE(encode_superblock_fp4_v2(r, codes, 122, c, q.data()).ok());
  EXPECT_EQ(q[0], 0x4D);
  EXPECT_EQ(q[1], 0x75);
  EXPECT_EQ(q[2], 0xC0);
  EXPECT_EQ(q[52], 0x7A);
  EXPECT_EQ(q[53], 0x3B);
  std::vector<uint16_t> out(256);
  const int64_t shape[2] = {1, 61};
  ASSERT_TRUE(decode_tensor(r, *cb, "w", q, shape, 256, {}, out).ok());
  const uint16_t want[8] = {0x3DB0, 0xBD30, 0x0000, 0x3E84, 0xBF04, 0x3E04, 0x3E30, 0xBDB0};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(out[static_cast<size_t>(j)], want[j]) << j;
  const double wantf[8] = {0.0859375, -0.04296875, 0, 0.2578125, -0.515625, 0.12890625, 0.171875, -0.0859375};
  for (int j = 0; j < 8; ++j)
    EXPECT_EQ(static_cast<double>(bf16_to_f32(out[static_cast<size_t>(j)])), wantf[j]);
}

TEST(CodecDecode, Fp8RoundingExample) {
  Rung r{Grid::FP8, Mode::Product, 32, 1};
  std::vector<std::vector<float>> t(4, std::vector<float>(256 * 2, 0.0f));
  t[0][0] = e4m3_to_f32(0x4D);
  ASSERT_EQ(t[0][0], 6.5f);
  auto cb = Codebook::from_tables(r, t);
  ASSERT_TRUE(cb.ok()) << cb.message();
  std::vector<uint8_t> q(128 + 16, 0);  // all codes 0 -> first coordinate of every codeword is 6.5
  const float s = 0.0123f;
  ASSERT_EQ(static_cast<double>(s), 0.012299999594688416);
  uint16_t out[256];
  decode_superblock_fp8(r, *cb, q.data(), s, out);
  EXPECT_EQ(6.5f * s, 0.0799499973654747f);
  EXPECT_EQ(out[0], 0x3DA4);
  EXPECT_EQ(bf16_to_f32(out[0]), 0.080078125f);
  EXPECT_EQ(out[1], 0x0000);
}

// Random legal superblocks for one rung, encoded through the public encoders and decoded both ways.
void round_trip(const Rung& r, uint32_t seed, int64_t experts) {
  std::mt19937 rng(seed);
  Book b = random_book(r.grid, r.k, rng);
  auto cb = Codebook::from_tables(r, b.t, "random");
  ASSERT_TRUE(cb.ok()) << cb.message();
  const int64_t rows = 3, in = 512;
  const int64_t total_rows = experts * rows;
  const int ts = r.type_size();
  std::vector<uint8_t> q(static_cast<size_t>(total_rows * (in / 256) * ts));
  std::vector<float> row_scale;
  for (int64_t row = 0; row < total_rows; ++row) {
    row_scale.push_back(
        std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f, static_cast<int>(rng() % 20) - 15));
    for (int64_t s = 0; s < in / 256; ++s) {
      uint8_t* sb = q.data() + (row * (in / 256) + s) * ts;
      std::vector<uint64_t> codes(32);
      for (auto& c : codes) c = (static_cast<uint64_t>(rng()) << 32 | rng()) & ((uint64_t{1} << r.k) - 1);
      if (r.grid == Grid::FP8) {
        ASSERT_TRUE(encode_superblock_fp8(r, codes, sb).ok());
      } else if (r.layout_version == 1) {
        uint8_t sc[16];
        for (auto& x : sc) {
          x = static_cast<uint8_t>(rng() % 0x7F);  // 0x00..0x7E: zero, subnormal and normal scales
        }
        ASSERT_TRUE(encode_superblock_fp4_v1(r, codes, sc, sb).ok());
      } else {
        uint8_t E = static_cast<uint8_t>(117 + rng() % 19);
        uint8_t c4[16];
        for (auto& x : c4) {
          do {
            x = static_cast<uint8_t>(rng() % 16);
          } while (!v2_legal(E, x));
        }
        ASSERT_TRUE(encode_superblock_fp4_v2(r, codes, E, c4, sb).ok());
      }
    }
  }
  std::vector<uint16_t> want = ref_decode(r, b, q.data(), total_rows, in, row_scale);
  std::vector<uint16_t> got(static_cast<size_t>(total_rows * in));
  std::vector<int64_t> shape = experts > 1 ? std::vector<int64_t>{experts, rows, (in / 256) * ts}
                                           : std::vector<int64_t>{rows, (in / 256) * ts};
  std::span<const float> ws =
      r.grid == Grid::FP8 ? std::span<const float>(row_scale) : std::span<const float>();
  Status st = decode_tensor(r, *cb, "random", q, shape, in, ws, got);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(got, want) << r.name() << " v" << r.layout_version;  // bit for bit, -0 included
  // Row decode agrees too.
  std::vector<uint16_t> row_out(static_cast<size_t>(in));
  decode_row(r, *cb, q.data() + (total_rows - 1) * (in / 256) * ts, in, row_scale.back(), row_out.data());
  ASSERT_TRUE(std::equal(row_out.begin(), row_out.end(), got.end() - in));
  // Encoding is deterministic: decoding the unpacked codes and re-encoding reproduces the bytes.
  if (r.grid == Grid::FP4 && r.layout_version == 2) {
    uint64_t codes[32];
    unpack_codes(q.data(), r.k, codes);
    V2Plane p = read_v2_plane(q.data() + 4 * r.k);
    std::vector<uint8_t> again(static_cast<size_t>(ts));
    ASSERT_TRUE(encode_superblock_fp4_v2(r, codes, p.E, p.c.data(), again.data()).ok());
    ASSERT_TRUE(std::equal(again.begin(), again.end(), q.begin()));
  }
}

TEST(CodecDecode, RandomRoundTripEveryRung) {
  uint32_t seed = 100;
  for (int lv : {1, 2})
    for (int k = 12; k <= 24; ++k) round_trip(Rung{Grid::FP4, Mode::Product, k, lv}, seed++, 1);
  for (int k = 28; k <= 48; ++k) round_trip(Rung{Grid::FP8, Mode::Product, k, 1}, seed++, 1);
}

TEST(CodecDecode, StackedExperts) {
  round_trip(Rung{Grid::FP4, Mode::Product, 16, 2}, 7, 4);
  round_trip(Rung{Grid::FP4, Mode::Product, 12, 1}, 8, 2);
  round_trip(Rung{Grid::FP8, Mode::Product, 41, 1}, 9, 3);
}

TEST(CodecDecode, CodebookRefusals) {
  Rung r{Grid::FP4, Mode::Product, 12, 1};
  std::vector<std::vector<float>> t(2, std::vector<float>(64 * 4, 0.5f));
  EXPECT_TRUE(Codebook::from_tables(r, t).ok());
  auto bad = t;
  bad[1][17] = 0.53125f;  // exact in BF16/FP16 but not an E2M1 value
  auto e = Codebook::from_tables(r, bad, "cb_codebook.lattice.NVFP4_CB_K12.sub1");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("off the E2M1 grid"), std::string::npos);
  EXPECT_NE(e.message().find("cb_codebook.lattice"), std::string::npos);
  bad = t;
  bad[0][0] = NAN;
  EXPECT_FALSE(Codebook::from_tables(r, bad).ok());
  bad = t;
  bad[0][0] = 5.0f;
  EXPECT_FALSE(Codebook::from_tables(r, bad).ok());
  bad = t;
  bad[0].pop_back();
  EXPECT_FALSE(Codebook::from_tables(r, bad).ok());
  EXPECT_FALSE(Codebook::from_tables(r, {t[0]}).ok());
  EXPECT_FALSE(
      Codebook::from_tables(Rung{Grid::FP4, Mode::Signed, 12, 1}, {std::vector<float>(16 * 8)}).ok());
  // FP8 grid: E4M3-exact values only.
  Rung r8{Grid::FP8, Mode::Product, 28, 1};
  std::vector<std::vector<float>> t8(4, std::vector<float>(128 * 2, 448.0f));
  EXPECT_TRUE(Codebook::from_tables(r8, t8).ok());
  t8[2][3] = 0.3f;
  EXPECT_FALSE(Codebook::from_tables(r8, t8).ok());
  t8[2][3] = 480.0f;
  EXPECT_FALSE(Codebook::from_tables(r8, t8).ok());
  t8[2][3] = -0.0625f;
  EXPECT_TRUE(Codebook::from_tables(r8, t8).ok());
  // FP16 tables as stored in the sidecar.
  std::vector<uint16_t> h0(256, 0x3800), h1(256, 0xC600);  // 0.5, -6
  auto h = Codebook::from_f16_tables(r, {h0, h1});
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->sub[1][0], -6.0f);
  h0[5] = 0x3840;  // 0.53125
  EXPECT_FALSE(Codebook::from_f16_tables(r, {h0, h1}).ok());
}

TEST(CodecDecode, TensorRefusals) {
  std::mt19937 rng(1);
  Rung r1{Grid::FP4, Mode::Product, 12, 1};
  Book b = random_book(Grid::FP4, 12, rng);
  auto cb1 = Codebook::from_tables(r1, b.t);
  ASSERT_TRUE(cb1.ok());
  std::vector<uint8_t> q(2 * 64, 0);
  std::vector<uint16_t> out(2 * 256);
  const int64_t shape[2] = {2, 64};
  ASSERT_TRUE(decode_tensor(r1, *cb1, "m.w", q, shape, 256, {}, out).ok());
  q[64 + 48 + 5] = 0x7F;  // NaN v1 scale in row 1
  Status st = decode_tensor(r1, *cb1, "m.w", q, shape, 256, {}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("m.w superblock 1"), std::string::npos) << st.message();
  q[64 + 48 + 5] = 0x81;  // sign bit
  EXPECT_FALSE(decode_tensor(r1, *cb1, "m.w", q, shape, 256, {}, out).ok());
  q[64 + 48 + 5] = 0x00;
  const int64_t off_by_one[2] = {2, 65};
  EXPECT_FALSE(decode_tensor(r1, *cb1, "m.w", q, off_by_one, 256, {}, out).ok());
  EXPECT_FALSE(decode_tensor(r1, *cb1, "m.w", q, shape, 300, {}, out).ok());  // in % 256 != 0
  std::vector<uint16_t> small(100);
  EXPECT_FALSE(decode_tensor(r1, *cb1, "m.w", q, shape, 256, {}, small).ok());
  const float one = 1.0f;
  EXPECT_FALSE(decode_tensor(r1, *cb1, "m.w", q, shape, 256, std::span<const float>(&one, 1), out).ok());

  // v2: an illegal pair anywhere is refused.
  Rung r2{Grid::FP4, Mode::Product, 12, 2};
  auto cb2 = Codebook::from_tables(r2, b.t);
  ASSERT_TRUE(cb2.ok());
  std::vector<uint8_t> q2(57, 0);
  q2[48] = 118;  // codes 0: legal
  const int64_t shape2[2] = {1, 57};
  std::vector<uint16_t> out2(256);
  ASSERT_TRUE(decode_tensor(r2, *cb2, "e", q2, shape2, 256, {}, out2).ok());
  q2[48] = 117;  // code 0 illegal for E = 117
  st = decode_tensor(r2, *cb2, "e", q2, shape2, 256, {}, out2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("illegal"), std::string::npos);
  // encoders refuse illegal inputs.
  std::vector<uint64_t> codes(32, 0);
  uint8_t c4[16] = {};
  EXPECT_FALSE(encode_superblock_fp4_v2(r2, codes, 117, c4, q2.data()).ok());
  c4[15] = 16;
  EXPECT_FALSE(encode_superblock_fp4_v2(r2, codes, 122, c4, q2.data()).ok());
  uint8_t sc[16] = {};
  sc[2] = 0xFF;
  EXPECT_FALSE(encode_superblock_fp4_v1(r1, codes, sc, q.data()).ok());
  sc[2] = 0x80;
  EXPECT_FALSE(encode_superblock_fp4_v1(r1, codes, sc, q.data()).ok());
  sc[2] = 0;
  codes[4] = 1 << 12;
  EXPECT_FALSE(encode_superblock_fp4_v1(r1, codes, sc, q.data()).ok());
  codes[4] = 0;
  EXPECT_FALSE(encode_superblock_fp4_v1(r2, codes, sc, q.data()).ok());  // wrong layout for this encoder

  // fp8 row scales: finite and > 0, one per row.
  Rung r8{Grid::FP8, Mode::Product, 28, 1};
  Book b8 = random_book(Grid::FP8, 28, rng);
  auto cb8 = Codebook::from_tables(r8, b8.t);
  ASSERT_TRUE(cb8.ok());
  std::vector<uint8_t> q8(2 * 112, 0);
  const int64_t shape8[2] = {2, 112};
  std::vector<uint16_t> out8(512);
  std::vector<float> ws = {1.0f, 2.0f};
  ASSERT_TRUE(decode_tensor(r8, *cb8, "f", q8, shape8, 256, ws, out8).ok());
  for (float badv : {0.0f, -1.0f, NAN, INFINITY}) {
    ws[1] = badv;
    EXPECT_FALSE(decode_tensor(r8, *cb8, "f", q8, shape8, 256, ws, out8).ok()) << badv;
  }
  ws = {1.0f};
  EXPECT_FALSE(decode_tensor(r8, *cb8, "f", q8, shape8, 256, ws, out8).ok());
  // A codebook built for another rung is refused.
  EXPECT_FALSE(decode_tensor(r2, *cb1, "m.w", q2, shape2, 256, {}, out2).ok());
}

}  // namespace
}  // namespace gridq::gridbook

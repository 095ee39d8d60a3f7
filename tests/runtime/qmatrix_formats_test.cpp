// CPU matmul over FP8 W8A8 and gridbook CB weights against float64 references built from the format's
// definition (format.md §12, §14) using the codec and activation-contract oracles of core/ and gridbook/.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/act_qdq.h"
#include "core/numerics.h"
#include "gridbook/codec.h"
#include "runtime/cpu/matmul.h"

namespace gridq::runtime {
namespace {

std::vector<float> randn(size_t n, std::mt19937& g, float s) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(QMatrixFormats, Fp8W8A8MatchesDefinition) {
  std::mt19937 g(11);
  const int R = 8, C = 64, T = 3;
  std::vector<uint8_t> w(static_cast<size_t>(R * C));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) {
    do b = static_cast<uint8_t>(byte(g));
    while ((b & 0x7F) == 0x7F);  // no NaN codes
  }
  std::vector<float> ws(R);
  for (auto& s : ws) s = 0.001f + std::abs(randn(1, g, 0.01f)[0]);
  auto x = randn(static_cast<size_t>(T * C), g, 1.0f);
  QMatrix m;
  m.format = WeightFormat::kFP8;
  m.rows = R;
  m.cols = C;
  m.data = w.data();
  m.row_scale = ws.data();
  std::vector<float> y(static_cast<size_t>(T * R));
  cpu::matmul(m, x.data(), T, y.data());
  for (int t = 0; t < T; ++t) {
    std::vector<uint8_t> qx(C);
    const float st = quantize_fp8_token_row_f32(std::span<const float>(x.data() + t * C, C), qx);
    for (int r = 0; r < R; ++r) {
      double acc = 0;
      for (int c = 0; c < C; ++c) acc += static_cast<double>(e4m3_to_f32(qx[static_cast<size_t>(c)])) * e4m3_to_f32(w[static_cast<size_t>(r * C + c)]);
      const float want = bf16_round(st * ws[static_cast<size_t>(r)] * static_cast<float>(acc));
      const float got = y[static_cast<size_t>(t * R + r)];
      EXPECT_LE(std::abs(got - want), std::abs(want) * 0x1p-7f + 1e-30f) << t << "," << r;
    }
  }
}

TEST(QMatrixFormats, CbFp4DecodesRowsAndAppliesFp4Contract) {
  auto rung = gridbook::parse_rung_name("NVFP4_CB_K16", 1);
  ASSERT_TRUE(rung.ok()) << rung.message();
  std::mt19937 g(5);
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<std::vector<float>> tables;
  const auto split = gridbook::sub_split(*rung);
  for (int i = 0; i < split.n; ++i) {
    std::vector<float> t(static_cast<size_t>((1 << split.width[i]) * rung->sub_dim()));
    for (auto& v : t) v = grid[g() % 8] * ((g() & 1) ? -1.0f : 1.0f);
    tables.push_back(std::move(t));
  }
  auto book = gridbook::Codebook::from_tables(*rung, tables);
  ASSERT_TRUE(book.ok()) << book.message();
  const int R = 4, C = 512, T = 2;
  const int64_t rb = gridbook::row_bytes(*rung, C);
  std::vector<uint8_t> data(static_cast<size_t>(R * rb));
  for (int r = 0; r < R; ++r)
    for (int sb = 0; sb < C / 256; ++sb) {
      std::vector<uint64_t> codes(32);
      for (auto& c : codes) c = g() & 0xFFFF;
      uint8_t scales[16];
      for (auto& s : scales) s = static_cast<uint8_t>(0x30 + g() % 16);
      ASSERT_TRUE(gridbook::encode_superblock_fp4_v1(*rung, codes, scales, data.data() + r * rb + sb * rung->type_size()).ok());
    }
  auto x = randn(static_cast<size_t>(T * C), g, 1.0f);
  for (int act : {16, 4}) {
    QMatrix m;
    m.format = WeightFormat::kCB;
    m.rows = R;
    m.cols = C;
    m.data = data.data();
    m.row_bytes = rb;
    m.rung = &*rung;
    m.codebook = &*book;
    m.act_bits = act;
    std::vector<float> y(static_cast<size_t>(T * R));
    cpu::matmul(m, x.data(), T, y.data());
    for (int t = 0; t < T; ++t) {
      std::vector<float> xq(x.begin() + t * C, x.begin() + (t + 1) * C);
      if (act == 4) {
        ASSERT_TRUE(qdq_fp4_row_f32(xq, xq).ok());
      }
      for (int r = 0; r < R; ++r) {
        std::vector<uint16_t> wr(C);
        gridbook::decode_row(*rung, *book, data.data() + r * rb, C, 0.0f, wr.data());
        double acc = 0, mag = 0;
        for (int c = 0; c < C; ++c) {
          acc += static_cast<double>(bf16_to_f32(wr[static_cast<size_t>(c)])) * xq[static_cast<size_t>(c)];
          mag += std::abs(static_cast<double>(bf16_to_f32(wr[static_cast<size_t>(c)])) * xq[static_cast<size_t>(c)]);
        }
        EXPECT_NEAR(y[static_cast<size_t>(t * R + r)], acc, 1e-5 * mag + 1e-6) << "act " << act << " t " << t << " r " << r;
      }
    }
  }
}

}  // namespace
}  // namespace gridq::runtime

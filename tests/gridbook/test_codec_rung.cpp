// Rung geometry, names and bit splits (format.md §3-§5, §17.3).
#include <gtest/gtest.h>

#include "gridbook/rung.h"

namespace gridq::gridbook {
namespace {

TEST(CodecRung, TypeSizeTable) {
  // format.md §4 table.
  const int ks[] = {12, 13, 14, 16, 18, 20, 24};
  const int v1[] = {64, 68, 72, 80, 88, 96, 112};
  const int v2[] = {57, 61, 65, 73, 81, 89, 105};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ((Rung{Grid::FP4, Mode::Product, ks[i], 1}).type_size(), v1[i]) << ks[i];
    EXPECT_EQ((Rung{Grid::FP4, Mode::Product, ks[i], 2}).type_size(), v2[i]) << ks[i];
  }
  const int k8[] = {28, 32, 36, 40, 44, 48};
  const int t8[] = {112, 128, 144, 160, 176, 192};
  for (int i = 0; i < 6; ++i) EXPECT_EQ((Rung{Grid::FP8, Mode::Product, k8[i], 1}).type_size(), t8[i]);
  EXPECT_EQ((Rung{Grid::FP4, Mode::Product, 16, 2}).bits_per_weight(), 2.28125);
  EXPECT_EQ((Rung{Grid::FP4, Mode::Product, 16, 1}).bits_per_weight(), 16 / 8.0 + 0.5);
  EXPECT_EQ((Rung{Grid::FP8, Mode::Product, 32, 1}).bits_per_weight(), 4.0);
  for (int k = 12; k <= 24; ++k) {
    EXPECT_EQ((Rung{Grid::FP4, Mode::Product, k, 1}).bits_per_weight(), k / 8.0 + 0.5);
    EXPECT_EQ((Rung{Grid::FP4, Mode::Product, k, 2}).bits_per_weight(), k / 8.0 + 0.28125);
  }
}

TEST(CodecRung, Geometry) {
  Rung fp4{Grid::FP4, Mode::Product, 16, 2};
  EXPECT_EQ(fp4.n_sub(), 2);
  EXPECT_EQ(fp4.sub_dim(), 4);
  EXPECT_EQ(fp4.plane_bytes(), 9);
  Rung fp8{Grid::FP8, Mode::Product, 41, 1};
  EXPECT_EQ(fp8.n_sub(), 4);
  EXPECT_EQ(fp8.sub_dim(), 2);
  EXPECT_EQ(fp8.plane_bytes(), 0);
  Rung s{Grid::FP4, Mode::Signed, 16, 2};
  EXPECT_EQ(s.n_sub(), 1);
  EXPECT_EQ(s.sub_dim(), 8);
}

TEST(CodecRung, NamesAndParsing) {
  EXPECT_EQ((Rung{Grid::FP4, Mode::Product, 16, 2}).name(), "NVFP4_CB_K16");
  EXPECT_EQ((Rung{Grid::FP8, Mode::Product, 32, 1}).name(), "FP8_CB_K32");
  EXPECT_EQ((Rung{Grid::FP4, Mode::Signed, 16, 1}).name(), "NVFP4_CB_S16");
  for (int lv : {1, 2}) {
    for (int k = 12; k <= 24; ++k) {
      Rung r{Grid::FP4, Mode::Product, k, lv};
      auto p = parse_rung_name(r.name(), lv);
      ASSERT_TRUE(p.ok()) << p.message();
      EXPECT_EQ(*p, r);
    }
    for (int k = 28; k <= 48; ++k) {
      auto p = parse_rung_name("FP8_CB_K" + std::to_string(k), lv);
      ASSERT_TRUE(p.ok()) << p.message();
      EXPECT_EQ(*p, (Rung{Grid::FP8, Mode::Product, k, 1}));  // fp8 is layout 1 whatever the artifact's
    }
  }
  auto s = parse_rung_name("NVFP4_CB_S16", 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("signed"), std::string::npos);
  for (const char* bad :
       {"NVFP4_CB_K11", "NVFP4_CB_K25", "FP8_CB_K27", "FP8_CB_K49", "NVFP4_CB_K016", "NVFP4_CB_K16x",
        "NVFP4_CB_K", "NVFP4_CB_K-16", "FP4_CB_K16", "nvfp4_cb_k16", "", "FP8_CB_S32"}) {
    EXPECT_FALSE(parse_rung_name(bad, 2).ok()) << bad;
  }
  EXPECT_FALSE(parse_rung_name("NVFP4_CB_K16", 3).ok());
  EXPECT_FALSE(validate_rung(Rung{Grid::FP4, Mode::Full, 12, 1}).ok());
  EXPECT_FALSE(validate_rung(Rung{Grid::FP8, Mode::Product, 32, 2}).ok());
  EXPECT_TRUE(validate_rung(Rung{Grid::FP4, Mode::Product, 12, 1}).ok());
}

TEST(CodecRung, BitSplitExamples) {
  EXPECT_EQ(bit_split(12, 2), (std::vector<int>{6, 6}));
  EXPECT_EQ(bit_split(13, 2), (std::vector<int>{7, 6}));
  EXPECT_EQ(bit_split(16, 2), (std::vector<int>{8, 8}));
  EXPECT_EQ(bit_split(30, 4), (std::vector<int>{8, 8, 7, 7}));
  EXPECT_EQ(bit_split(37, 4), (std::vector<int>{10, 9, 9, 9}));
  EXPECT_EQ(bit_offsets(30, 4), (std::vector<int>{0, 8, 16, 23}));
  EXPECT_EQ(bit_offsets(13, 2), (std::vector<int>{0, 7}));
}

TEST(CodecRung, BitSplitEveryLadderRung) {
  auto check = [](int k, int n, Rung r) {
    std::vector<int> w = bit_split(k, n), off = bit_offsets(k, n);
    ASSERT_EQ(static_cast<int>(w.size()), n);
    int sum = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(off[static_cast<size_t>(i)], sum);
      sum += w[static_cast<size_t>(i)];
      // Independent statement of the rule: ceil-first, as even as possible.
      int want = (k + n - 1 - i) / n;  // = floor(k/n) + (i < k mod n)
      EXPECT_EQ(w[static_cast<size_t>(i)], want) << k << "," << n << "," << i;
      if (i > 0) {
        EXPECT_LE(w[static_cast<size_t>(i)], w[static_cast<size_t>(i - 1)]);
      }
    }
    EXPECT_EQ(sum, k);
    SubSplit s = sub_split(r);
    ASSERT_EQ(s.n, n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(s.width[i], w[static_cast<size_t>(i)]);
      EXPECT_EQ(s.offset[i], off[static_cast<size_t>(i)]);
    }
  };
  for (int k = 12; k <= 24; ++k) check(k, 2, Rung{Grid::FP4, Mode::Product, k, 2});
  for (int k = 28; k <= 48; ++k) check(k, 4, Rung{Grid::FP8, Mode::Product, k, 1});
  EXPECT_EQ(bit_split(16, 2), (std::vector<int>{8, 8}));  // K16: every sub-index is one byte
}

}  // namespace
}  // namespace gridq::gridbook

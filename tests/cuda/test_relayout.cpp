// The load-time re-layout is a lossless permutation: tiled -> canonical gives back every byte, and every
// tiled byte comes from exactly one canonical byte (checked with distinct byte positions).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "runtime/cuda/relayout.h"

namespace gridq::cuda::test {
namespace {

TEST(CudaRelayout, CbRoundTripEveryRung) {
  Rng r(1);
  for (int k : {12, 16, 20, 24})
    for (int v : {1, 2}) {
      const int rows = 48, in = 768;
      const size_t n = static_cast<size_t>(rows) * (in / 256) * (4 * k + (v == 2 ? 9 : 16));
      std::vector<uint8_t> canon(n);
      for (auto& b : canon) b = static_cast<uint8_t>(r.u64());
      auto t = cb_relayout(k, v, rows, in, canon);
      ASSERT_TRUE(t.ok()) << t.message();
      EXPECT_EQ(t->size(), n);
      EXPECT_EQ(static_cast<size_t>(cb_unit_bytes(k, v)) * (rows / 16) * (in / 256), n);
      auto back = cb_relayout_inverse(k, v, rows, in, *t);
      ASSERT_TRUE(back.ok()) << back.message();
      EXPECT_EQ(*back, canon) << "k=" << k << " v=" << v;
    }
}

TEST(CudaRelayout, CbIsAPermutation) {
  // Tag each canonical byte with its position (three planes of the low/mid/high byte) and check that the
  // tiled image contains every position exactly once.
  for (int k : {12, 16, 20, 24})
    for (int v : {1, 2}) {
      const int rows = 32, in = 512;
      const size_t n = static_cast<size_t>(rows) * (in / 256) * (4 * k + (v == 2 ? 9 : 16));
      std::vector<uint32_t> got(n, 0);
      for (int plane = 0; plane < 3; ++plane) {
        std::vector<uint8_t> c(n);
        for (size_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(i >> (8 * plane));
        auto t = cb_relayout(k, v, rows, in, c);
        ASSERT_TRUE(t.ok());
        for (size_t i = 0; i < n; ++i) got[i] |= static_cast<uint32_t>((*t)[i]) << (8 * plane);
      }
      std::vector<int> hits(n, 0);
      for (uint32_t p : got) {
        ASSERT_LT(p, n);
        ++hits[p];
      }
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i], 1) << "k=" << k << " v=" << v << " canonical byte " << i;
    }
}

TEST(CudaRelayout, DenseRoundTrip) {
  Rng r(2);
  const int rows = 64, in = 320;
  std::vector<uint8_t> f8(static_cast<size_t>(rows) * in);
  for (auto& b : f8) b = static_cast<uint8_t>(r.u64());
  auto t8 = fp8_relayout(rows, in, f8);
  ASSERT_TRUE(t8.ok());
  auto b8 = fp8_relayout_inverse(rows, in, *t8);
  ASSERT_TRUE(b8.ok());
  EXPECT_EQ(*b8, f8);
  EXPECT_NE(*t8, f8);
  std::vector<uint16_t> bf(static_cast<size_t>(rows) * in);
  for (auto& b : bf) b = static_cast<uint16_t>(r.u64());
  auto tb = bf16_relayout(rows, in, bf);
  ASSERT_TRUE(tb.ok());
  auto bb = bf16_relayout_inverse(rows, in, *tb);
  ASSERT_TRUE(bb.ok());
  EXPECT_EQ(*bb, bf);
}

TEST(CudaRelayout, RefusesShapesTheKernelsCannotServe) {
  std::vector<uint8_t> c(static_cast<size_t>(17) * 73, 0);
  EXPECT_FALSE(cb_relayout(16, 2, 17, 256, c).ok());  // rows % 16
  std::vector<uint8_t> c2(static_cast<size_t>(16) * 73 * 2, 0);
  EXPECT_FALSE(cb_relayout(16, 2, 16, 384, c2).ok());                                       // in % 256 / size
  EXPECT_FALSE(cb_relayout(13, 2, 16, 512, c2).ok());                                       // odd k
  EXPECT_FALSE(cb_relayout(16, 3, 16, 512, c2).ok());                                       // layout version
  EXPECT_FALSE(cb_relayout(16, 2, 16, 512, std::span<const uint8_t>(c2).first(100)).ok());  // size
  std::vector<uint8_t> d(static_cast<size_t>(16) * 96);
  EXPECT_FALSE(fp8_relayout(16, 96, d).ok());  // in % 64
}

}  // namespace
}  // namespace gridq::cuda::test

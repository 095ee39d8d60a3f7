// HessianAccumulator and HoldoutRows on synthetic rows: H against a float64 XᵀX, independence from how the
// rows are delivered and absorbed and from the thread count, the router weighting, and the holdout
// reservoir's spacing.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "quant/hessian_accum.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

std::vector<float> accumulate(const std::vector<float>& x, int C, const std::vector<int64_t>& pieces,
                              const float* scale = nullptr, bool absorb_each = false) {
  HessianAccumulator acc(C);
  int64_t r = 0;
  for (int64_t n : pieces) {
    acc.add_rows(x.data() + r * C, n, scale ? scale + r : nullptr);
    if (absorb_each) acc.absorb();
    r += n;
  }
  EXPECT_EQ(acc.rows(), r);
  return acc.finish();
}

TEST(HessianAccumulator, MatchesFloat64AndIgnoresDeliveryAndThreads) {
  for (int C : {1, 7, 50, 131}) {
    const int64_t n = 613;  // two full blocks and a partial one
    const auto x = testing::gaussian(static_cast<size_t>(n * C), 11 + C);
    const auto H = accumulate(x, C, {n});
    ASSERT_EQ(H.size(), static_cast<size_t>(C) * C);
    double worst = 0.0;
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < C; ++j) {
        double ref = 0.0;
        for (int64_t t = 0; t < n; ++t) ref += double{x[t * C + i]} * x[t * C + j];
        worst = std::max(worst, std::abs(H[static_cast<size_t>(i * C + j)] - ref) / n);
        EXPECT_EQ(H[static_cast<size_t>(i * C + j)], H[static_cast<size_t>(j * C + i)]);
      }
    EXPECT_LT(worst, 1e-5) << "C " << C;
    // Same rows, other deliveries and thread counts: the same bytes.
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = accumulate(x, C, {1, 300, 2, 310});
    omp_set_num_threads(2);
    const auto two = accumulate(x, C, {256, 256, 101}, nullptr, true);
    const auto odd = accumulate(x, C, {3, 400, 10, 200}, nullptr, true);
    omp_set_num_threads(saved);
    EXPECT_EQ(0, std::memcmp(H.data(), one.data(), H.size() * 4)) << "C " << C;
    EXPECT_EQ(0, std::memcmp(H.data(), two.data(), H.size() * 4)) << "C " << C;
    EXPECT_EQ(0, std::memcmp(H.data(), odd.data(), H.size() * 4)) << "C " << C;
  }
}

TEST(HessianAccumulator, RouterWeightedRows) {
  const int C = 24;
  const int64_t n = 40;
  const auto x = testing::gaussian(static_cast<size_t>(n * C), 5);
  std::vector<float> g(static_cast<size_t>(n)), gx(x.size());
  for (int64_t t = 0; t < n; ++t) {
    g[static_cast<size_t>(t)] = 0.1f + 0.02f * static_cast<float>(t);
    for (int c = 0; c < C; ++c)
      gx[static_cast<size_t>(t * C + c)] = x[static_cast<size_t>(t * C + c)] * g[static_cast<size_t>(t)];
  }
  const auto weighted = accumulate(x, C, {n}, g.data());
  const auto direct = accumulate(gx, C, {n});
  EXPECT_EQ(0, std::memcmp(weighted.data(), direct.data(), weighted.size() * 4));
}

TEST(HoldoutRows, KeepsEvenlySpacedRowsInOrder) {
  const int C = 3;
  for (int64_t total : {0, 5, 512, 513, 1500, 4096}) {
    HoldoutRows h(C, 512);
    for (int64_t k = 0; k < total; ++k) {
      const float row[3] = {static_cast<float>(k), 0.0f, 1.0f};
      h.add(row);
    }
    int64_t stride = 1;
    while ((total + stride - 1) / stride > 512) stride *= 2;
    ASSERT_EQ(h.count(), (total + stride - 1) / stride) << total;
    for (int64_t i = 0; i < h.count(); ++i)
      EXPECT_EQ(h.rows()[static_cast<size_t>(i * C)], static_cast<float>(i * stride));
    EXPECT_EQ(h.seen(), total);
  }
}

}  // namespace
}  // namespace gridq::quant

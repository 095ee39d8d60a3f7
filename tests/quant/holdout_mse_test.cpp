// holdout_output_mse (cb_gptq.h) runs its float64 chains side by side (quant/holdout_mse.cpp); its bits must
// be the one-chain-at-a-time definition's, which the GPU batch also repeats: shapes off every block size
// (rows not a multiple of 16 or 2, holdout rows not a multiple of 8), across thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/cb_gptq.h"

namespace gridq::quant {
namespace {

// The definition: per row, Σ_t (Σ_j (Ŵ − W)[r, j]·x[t, j])², j and t ascending, rows added in order.
double naive(const std::vector<float>& X, int64_t n, const std::vector<float>& W,
             const std::vector<float>& Wh, int R, int C) {
  double total = 0.0;
  for (int r = 0; r < R; ++r) {
    double acc = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      double y = 0.0;
      for (int j = 0; j < C; ++j) {
        const double d =
            static_cast<double>(Wh[size_t(r) * C + j]) - static_cast<double>(W[size_t(r) * C + j]);
        const double p = d * static_cast<double>(X[size_t(t) * C + j]);  // rounded apart from the sum
        y += p;
      }
      const double y2 = y * y;
      acc += y2;
    }
    total += acc;
  }
  return total / (static_cast<double>(n) * R);
}

uint64_t bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}

TEST(HoldoutMse, SameBitsAsOneChainAtATime) {
  std::mt19937 g(7);
  std::normal_distribution<float> nd;
  for (auto [R, C, n] : {std::tuple{37, 100, 19}, {16, 64, 8}, {1, 33, 1}, {35, 257, 41}}) {
    std::vector<float> X(size_t(n) * C), W(size_t(R) * C), Wh(size_t(R) * C);
    for (float& v : X) v = nd(g) * 3.0f;
    for (size_t i = 0; i < W.size(); ++i) {
      W[i] = nd(g) * 0.02f;
      Wh[i] = W[i] + nd(g) * 1e-3f;
    }
    const double want = naive(X, n, W, Wh, R, C);
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      const double got = holdout_output_mse(X.data(), n, W.data(), Wh.data(), R, C);
      EXPECT_EQ(bits(got), bits(want))
          << R << "×" << C << ", n " << n << ", threads " << threads << ": " << got << " vs " << want;
    }
  }
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(holdout_output_mse(nullptr, 0, nullptr, nullptr, 4, 4), 0.0);
}

}  // namespace
}  // namespace gridq::quant

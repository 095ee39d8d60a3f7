// Bit allocation (quantizer.md §7) against an exhaustive search over every choice vector of small random
// instances, plus the edge cases: infeasible budgets, a budget met exactly, deterministic ties, the binned
// fallback's guarantees, and the exact serialized bit counts of each format.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "quant/allocate.h"
#include "quant/output_proxy.h"
#include "quant/prng.h"

namespace gridq::quant {
namespace {

struct Brute {
  bool feasible = false;
  double cost = std::numeric_limits<double>::infinity();
  double bits = 0;
  std::vector<int> choice;
  int optimal_count = 0;  // choice vectors within `tie_eps` of the best cost
};

// Every choice vector in lexicographic order; among those with minimal cost (exact compare), the fewest bits,
// then the lexicographically smallest (the first met) — the documented tie rule.
Brute brute_force(const std::vector<AllocUnit>& units, double budget_bits) {
  Brute best;
  std::vector<int> c(units.size(), 0);
  while (true) {
    double bits = 0, cost = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      bits += units[u].options[c[u]].bits;
      cost += units[u].options[c[u]].cost;
    }
    if (bits <= budget_bits &&
        (!best.feasible || cost < best.cost || (cost == best.cost && bits < best.bits))) {
      best.feasible = true;
      best.cost = cost;
      best.bits = bits;
      best.choice = c;
    }
    size_t u = units.size();
    while (u > 0 && ++c[u - 1] == static_cast<int>(units[u - 1].options.size())) c[--u] = 0;
    if (u == 0) break;
  }
  return best;
}

double total_params(const std::vector<AllocUnit>& units) {
  double p = 0;
  for (const auto& u : units) p += static_cast<double>(u.params);
  return p;
}

std::vector<AllocUnit> random_instance(uint64_t seed, bool integral_bits) {
  SplitMix64 rng(seed);
  const int n = 1 + static_cast<int>(rng.next() % 6);
  std::vector<AllocUnit> units(n);
  for (int u = 0; u < n; ++u) {
    units[u].name = "u" + std::to_string(u);
    units[u].params = 64 + static_cast<int64_t>(rng.next() % 512);
    const int k = 1 + static_cast<int>(rng.next() % 4);
    for (int o = 0; o < k; ++o) {
      const double bpw = 1.0 + 15.0 * rng.uniform();
      double bits = std::floor(bpw * static_cast<double>(units[u].params));
      if (!integral_bits) bits += 0.25 + 0.5 * rng.uniform();
      // Costs fall with bits on average but not always (a worse format may be listed).
      const double cost = std::max(0.0, 100.0 / bpw + 10.0 * rng.uniform());
      units[u].options.push_back({"f" + std::to_string(o), bits, cost});
    }
  }
  return units;
}

// The fewest and the most bits any plan of `units` can take: every unit at its smallest / largest option.
std::pair<double, double> bits_range(const std::vector<AllocUnit>& units) {
  double lo = 0, hi = 0;
  for (const auto& u : units) {
    double mn = 1e300, mx = 0;
    for (const auto& o : u.options) mn = std::min(mn, o.bits), mx = std::max(mx, o.bits);
    lo += mn;
    hi += mx;
  }
  return {lo, hi};
}

TEST(Allocate, MatchesExhaustiveSearchOnRandomInstances) {
  int checked = 0, binding = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    std::vector<AllocUnit> units = random_instance(seed, true);
    const double P = total_params(units);
    const auto [lo, hi] = bits_range(units);
    SplitMix64 rng(seed * 977);
    const double budget_bits = std::floor(lo + (hi - lo) * rng.uniform());
    const double budget_bpw = budget_bits / P;
    SCOPED_TRACE(seed);
    auto plan = allocate(units, budget_bpw);
    ASSERT_TRUE(plan.ok()) << plan.message();
    const Brute b = brute_force(units, budget_bits);
    ASSERT_TRUE(b.feasible);
    EXPECT_LE(plan->bits, budget_bits);
    // The DP sums costs in another order than the brute force; compare values with a tolerance and the
    // choice exactly whenever the optimum is clear (it is, for random real costs).
    EXPECT_NEAR(plan->cost, b.cost, 1e-9 * std::max(1.0, b.cost));
    EXPECT_EQ(plan->choice, b.choice);
    // The plan's own numbers are those of its choice.
    double bits = 0, cost = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      bits += units[u].options[plan->choice[u]].bits;
      cost += units[u].options[plan->choice[u]].cost;
    }
    EXPECT_EQ(plan->bits, bits);
    EXPECT_DOUBLE_EQ(plan->cost, cost);
    EXPECT_DOUBLE_EQ(plan->bpw, bits / P);
    ++checked;
    binding += b.bits < hi && b.bits > lo;
  }
  EXPECT_EQ(checked, 600);
  EXPECT_GT(binding, 100);  // the instances exercise the budget, not only the extremes
}

TEST(Allocate, BinnedFallbackNeverExceedsAndLosesAtMostOneBinPerUnit) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::vector<AllocUnit> units = random_instance(seed + 10000, false);  // fractional bits: binned mode
    const double P = total_params(units);
    const auto [lo, hi] = bits_range(units);
    SplitMix64 rng(seed * 31);
    const double budget_bits = lo + (hi - lo) * rng.uniform();
    SCOPED_TRACE(seed);
    auto plan = allocate(units, budget_bits / P);
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_LE(plan->bits, budget_bits * (1 + 1e-12));
    const Brute exact = brute_force(units, budget_bits);
    EXPECT_GE(plan->cost, exact.cost - 1e-9 * std::max(1.0, exact.cost));
    // Rounding each extra up to a 0.001-bpw bin loses at most one bin per unit of budget.
    const Brute shrunk = brute_force(units, budget_bits - 0.001 * P * static_cast<double>(units.size()));
    if (shrunk.feasible) {
      EXPECT_LE(plan->cost, shrunk.cost + 1e-9 * std::max(1.0, shrunk.cost));
    }
  }
}

TEST(Allocate, InfeasibleBudgetNamesTheRange) {
  std::vector<AllocUnit> units = {{"a", 1000, {{"K12", 1781.25 * 1, 3.0}, {"BF16", 16000, 0.0}}},
                                  {"b", 1000, {{"K16", 2281.25, 2.0}, {"FP8", 8000, 0.5}}}};
  auto p = allocate(units, 1.5);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("1.5"), std::string::npos) << p.message();
  EXPECT_NE(p.message().find("2.03125"), std::string::npos) << p.message();  // (1781.25+2281.25)/2000
  EXPECT_NE(p.message().find("12"), std::string::npos) << p.message();       // max (16000+8000)/2000
  EXPECT_FALSE(allocate({}, 4.0).ok());
  EXPECT_FALSE(allocate({{"a", 10, {}}}, 4.0).ok());
  EXPECT_FALSE(allocate({{"a", 0, {{"x", 1, 1}}}}, 4.0).ok());
  EXPECT_FALSE(allocate({{"a", 10, {{"x", 1, std::nan("")}}}}, 4.0).ok());
  EXPECT_FALSE(allocate({{"a", 10, {{"x", -1, 1}}}}, 4.0).ok());
  EXPECT_FALSE(allocate({{"a", 10, {{"x", 1, 1}}}}, std::nan("")).ok());
}

TEST(Allocate, BudgetMetExactly) {
  // 1000 params; the best plan uses exactly 2300 bits = 2.3 bpw (2.3 is not exact in binary).
  std::vector<AllocUnit> units = {{"a", 500, {{"lo", 800, 5.0}, {"hi", 1300, 1.0}}},
                                  {"b", 500, {{"lo", 500, 4.0}, {"hi", 1000, 1.5}}}};
  auto p = allocate(units, 2.3);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->choice, (std::vector<int>{1, 1}));
  EXPECT_EQ(p->bits, 2300.0);
  // One bit less and only one unit can be upgraded: the larger reduction (a: 4.0 > b: 2.5).
  auto q = allocate(units, 2.299);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->choice, (std::vector<int>{1, 0}));
  EXPECT_EQ(q->bits, 1800.0);
}

TEST(Allocate, TiesAreDeterministic) {
  // Equal costs everywhere: the fewest bits (every unit at its cheapest option), whatever the order listed.
  std::vector<AllocUnit> flat = {{"a", 10, {{"x", 40, 1.0}, {"y", 20, 1.0}}},
                                 {"b", 10, {{"x", 30, 2.0}, {"y", 30, 2.0}}}};
  auto f = allocate(flat, 100.0);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->choice, (std::vector<int>{1, 0}));  // a: the cheaper y; b: equal bits, listed first
  // Two identical units, budget for one upgrade: equal totals; the lexicographically smallest choice
  // vector keeps unit 0 at its first-listed option.
  std::vector<AllocUnit> twin = {{"a", 10, {{"lo", 20, 2.0}, {"hi", 40, 1.0}}},
                                 {"b", 10, {{"lo", 20, 2.0}, {"hi", 40, 1.0}}}};
  auto t = allocate(twin, 3.0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->choice, (std::vector<int>{0, 1}));
  const Brute b = brute_force(twin, 60.0);
  EXPECT_EQ(b.choice, t->choice);
  // Repeated runs give the same plan.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(allocate(twin, 3.0)->choice, t->choice);
  // Integer costs (exact sums) on random instances: the brute force's tie rule is reproduced exactly.
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::vector<AllocUnit> units = random_instance(seed + 50000, true);
    for (auto& u : units)
      for (auto& o : u.options) o.cost = std::floor(o.cost / 20.0);  // few distinct values: many ties
    const double P = total_params(units);
    double hi = 0;
    for (const auto& u : units) {
      double mx = 0;
      for (const auto& o : u.options) mx = std::max(mx, o.bits);
      hi += mx;
    }
    auto p = allocate(units, hi / P);
    ASSERT_TRUE(p.ok()) << p.message();
    const Brute br = brute_force(units, hi);
    EXPECT_EQ(p->choice, br.choice) << seed;
  }
}

TEST(Allocate, MatrixBitsAreTheSerializedSizes) {
  // quantizer.md §7: K12 1.78, K16 2.28, K20 2.78, K24 3.28 bpw (v2), FP8_CB k/8 (+32/C), FP8_DYNAMIC 8 +
  // 32/C.
  const int64_t R = 256, C = 512;
  const double rc = double(R) * C;
  EXPECT_EQ(*matrix_bits("NVFP4_CB_K16", R, C), 2.28125 * rc);
  EXPECT_EQ(*matrix_bits("NVFP4_CB_K12", R, C), 1.78125 * rc);
  EXPECT_EQ(*matrix_bits("NVFP4_CB_K20", R, C), 2.78125 * rc);
  EXPECT_EQ(*matrix_bits("NVFP4_CB_K24", R, C), 3.28125 * rc);
  EXPECT_EQ(*matrix_bits("NVFP4_CB_K16", R, C, 1), 2.5 * rc);  // v1: 16 E4M3 scale bytes per 256
  EXPECT_EQ(*matrix_bits("FP8_CB_K32", R, C), 4.0 * rc + 32.0 * R);
  EXPECT_EQ(*matrix_bits("FP8_CB_K44", R, C), 5.5 * rc + 32.0 * R);
  EXPECT_EQ(*matrix_bits("FP8_DYNAMIC", R, C), 8.0 * rc + 32.0 * R);
  EXPECT_EQ(*matrix_bits("BF16", R, C), 16.0 * rc);
  EXPECT_FALSE(matrix_bits("NVFP4_CB_K16", R, 384).ok());
  EXPECT_FALSE(matrix_bits("INT4", R, C).ok());
  // Laguna's routed stack per layer (format.md §9): 688.9 MB = 256 experts · (2048·12 + 3072·4) · 73 B.
  const double gate_up = *matrix_bits("NVFP4_CB_K16", 2048, 3072),
               down = *matrix_bits("NVFP4_CB_K16", 3072, 1024);
  EXPECT_EQ((gate_up + down) * 256 / 8, 256.0 * (2048 * 12 + 3072 * 4) * 73);
}

// D = ½·tr(ΔW H ΔWᵀ)/T against its meaning with H = XᵀX: ½·Σ_t ‖ΔW x_t‖² / T, computed from the rows of X.
TEST(OutputProxy, EqualsHalfTheOutputErrorPerToken) {
  const int R = 24, C = 40, n = 300;
  SplitMix64 rng(5);
  std::vector<float> W(R * C), Wh(R * C), X(n * C), H(C * C, 0.0f);
  for (auto& v : W) v = static_cast<float>(rng.gaussian());
  for (size_t i = 0; i < Wh.size(); ++i) Wh[i] = W[i] + static_cast<float>(0.05 * rng.gaussian());
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < C; ++j) X[t * C + j] = static_cast<float>(rng.gaussian() * (1.0 + j % 7));
  std::vector<double> Hd(C * C, 0.0);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < C; ++j) Hd[i * C + j] += double(X[t * C + i]) * X[t * C + j];
  for (int i = 0; i < C * C; ++i) H[i] = static_cast<float>(Hd[i]);
  double direct = 0;
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < R; ++r) {
      double y = 0;
      for (int j = 0; j < C; ++j) y += (double(Wh[r * C + j]) - W[r * C + j]) * X[t * C + j];
      direct += y * y;
    }
  direct = 0.5 * direct / 1000.0;  // T = 1000 calibration tokens in all (this input saw n of them)
  auto d = output_proxy(W.data(), Wh.data(), R, C, H.data(), 1000);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_NEAR(*d, direct, 1e-6 * direct);  // H was rounded to fp32, as the capture stores it
  auto same = output_proxy(W.data(), W.data(), R, C, H.data(), 1000);
  EXPECT_EQ(*same, 0.0);
  // Thread count does not change a bit.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = *output_half_trace(W.data(), Wh.data(), R, C, H.data());
  omp_set_num_threads(2);
  const double two = *output_half_trace(W.data(), Wh.data(), R, C, H.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one / 1000.0, *d);
  EXPECT_FALSE(output_proxy(W.data(), Wh.data(), R, C, H.data(), 0).ok());
  Wh[3] = std::nanf("");
  EXPECT_FALSE(output_proxy(W.data(), Wh.data(), R, C, H.data(), 1000).ok());
}

}  // namespace
}  // namespace gridq::quant

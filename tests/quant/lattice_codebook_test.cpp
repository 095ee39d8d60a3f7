// Lattice sub-tables (quantizer.md §3): on the grid, distinct and sorted, deterministic (bit-identical
// rebuilds, independent of the thread count), and Lloyd's actually lowers the distortion against its own
// start.
#include "quant/lattice_codebook.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "gridbook/codec.h"
#include "quant/grid_values.h"
#include "quant/prng.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

using gridbook::Grid;

void expect_valid_table(const std::vector<float>& t, Grid grid, int bits, int dim) {
  ASSERT_EQ(t.size(), size_t(1 << bits) * dim);
  for (float v : t) {
    EXPECT_TRUE(grid == Grid::FP4 ? gridbook::on_e2m1_grid(v) : gridbook::on_e4m3_grid(v)) << v;
    EXPECT_FALSE(v == 0.0f && std::signbit(v)) << "-0 in table";
  }
  const int K = 1 << bits;
  for (int k = 1; k < K; ++k) {
    // Strictly increasing in lexicographic order: sorted and distinct.
    EXPECT_TRUE(std::lexicographical_compare(&t[size_t(k - 1) * dim], &t[size_t(k) * dim],
                                             &t[size_t(k) * dim], &t[size_t(k + 1) * dim]))
        << "entries " << k - 1 << " and " << k << " out of order or equal";
  }
}

// Mean squared distance of the samples to their nearest entry (brute force, independent of the builder).
double distortion(const std::vector<float>& t, int dim, const std::vector<double>& x) {
  const size_t K = t.size() / dim;
  double total = 0.0;
  for (size_t i = 0; i < x.size() / dim; ++i) {
    double best = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < K; ++k) {
      double d = 0.0;
      for (int j = 0; j < dim; ++j) {
        const double e = x[i * dim + j] - t[k * dim + j];
        d += e * e;
      }
      best = std::min(best, d);
    }
    total += best;
  }
  return total / static_cast<double>(x.size() / dim);
}

// Fresh FP4 samples (a different seed from the builder's): groups of 16 scaled by amax/6.
std::vector<double> fp4_samples(int n_vec, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<double> x;
  while (static_cast<int>(x.size()) < n_vec * 4) {
    double g[16], amax = 0.0;
    for (double& v : g) {
      v = rng.gaussian();
      amax = std::max(amax, std::fabs(v));
    }
    for (double v : g) x.push_back(v / (amax / 6.0));
  }
  x.resize(size_t(n_vec) * 4);
  return x;
}

TEST(LatticeCodebook, Fp4K16TableIsOnGridSortedAndDeterministic) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> a = build_lattice_table(Grid::FP4, 8, 4);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("lattice FP4 256x4 (K16 sub-table) build: %.3f s\n", secs);
  expect_valid_table(a, Grid::FP4, 8, 4);
  const std::vector<float> b = build_lattice_table(Grid::FP4, 8, 4);
  EXPECT_EQ(testing::fnv1a(a), testing::fnv1a(b));
  // Thread count must not matter.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> c = build_lattice_table(Grid::FP4, 8, 4);
  omp_set_num_threads(2);
  const std::vector<float> d = build_lattice_table(Grid::FP4, 8, 4);
  omp_set_num_threads(saved);
  EXPECT_EQ(testing::fnv1a(a), testing::fnv1a(c));
  EXPECT_EQ(testing::fnv1a(a), testing::fnv1a(d));
  std::printf("lattice FP4 256x4 fnv1a %016llx\n", static_cast<unsigned long long>(testing::fnv1a(a)));
}

TEST(LatticeCodebook, LloydLowersDistortionAgainstItsStart) {
  LatticeParams start;
  start.iterations = 0;  // the initial K distinct snapped samples, sorted
  const std::vector<float> init = build_lattice_table(Grid::FP4, 8, 4, start);
  const std::vector<float>& lloyd = lattice_table(Grid::FP4, 8, 4);
  expect_valid_table(init, Grid::FP4, 8, 4);
  const std::vector<double> x = fp4_samples(20000, 0x5EED);
  const double d0 = distortion(init, 4, x);
  const double d1 = distortion(lloyd, 4, x);
  std::printf("K16 sub-table distortion on fresh samples: start %.4f, 12 iterations %.4f\n", d0, d1);
  EXPECT_LT(d1, 0.9 * d0);
  // Grid snapping alone (every coordinate to its nearest E2M1 value, no codebook) bounds it from below.
  double snap = 0.0;
  for (double v : x) {
    const double e = v - snap_to_grid(v, grid_magnitudes(Grid::FP4));
    snap += e * e;
  }
  EXPECT_GT(d1, snap / (x.size() / 4));
}

TEST(LatticeCodebook, EveryRungBuildsValidBooks) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int k : {12, 13, 16, 20, 24}) {
    auto r = gridbook::parse_rung_name("NVFP4_CB_K" + std::to_string(k), 2);
    ASSERT_TRUE(r.ok()) << r.message();
    auto cb = lattice_codebook(*r);
    ASSERT_TRUE(cb.ok()) << cb.message();
    const auto widths = gridbook::bit_split(k, 2);
    for (int i = 0; i < 2; ++i) expect_valid_table(cb->sub[i], Grid::FP4, widths[i], 4);
    // Equal sub-index widths give one table (the CPU decoder's one-table lookups rely on the flag).
    EXPECT_EQ(widths[0] == widths[1], cb->subs_identical) << "K" << k;
  }
  const double fp4_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  for (int k : {28, 32, 40, 48}) {
    auto r = gridbook::parse_rung_name("FP8_CB_K" + std::to_string(k), 1);
    ASSERT_TRUE(r.ok()) << r.message();
    auto cb = lattice_codebook(*r);
    ASSERT_TRUE(cb.ok()) << cb.message();
    const auto widths = gridbook::bit_split(k, 4);
    for (int i = 0; i < 4; ++i) expect_valid_table(cb->sub[i], Grid::FP8, widths[i], 2);
  }
  const double fp8_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::printf("lattice books: NVFP4 K12/13/16/20/24 %.2f s, FP8 K28/32/40/48 %.2f s\n", fp4_secs, fp8_secs);
}

TEST(LatticeCodebook, CachedTableEqualsFreshBuild) {
  const std::vector<float>& cached = lattice_table(Grid::FP8, 7, 2);
  EXPECT_EQ(testing::fnv1a(cached), testing::fnv1a(build_lattice_table(Grid::FP8, 7, 2)));
}

TEST(LatticeCodebook, SnapTiesGoToSmallerMagnitude) {
  auto m4 = grid_magnitudes(Grid::FP4);
  EXPECT_EQ(snap_to_grid(2.5, m4), 2.0f);
  EXPECT_EQ(snap_to_grid(-2.5, m4), -2.0f);
  EXPECT_EQ(snap_to_grid(0.25, m4), 0.0f);
  EXPECT_FALSE(std::signbit(snap_to_grid(-0.25, m4)));
  EXPECT_EQ(snap_to_grid(5.0, m4), 4.0f);
  EXPECT_EQ(snap_to_grid(5.0001, m4), 6.0f);
  EXPECT_EQ(snap_to_grid(100.0, m4), 6.0f);
  auto m8 = grid_magnitudes(Grid::FP8);
  EXPECT_EQ(m8.size(), 127u);
  EXPECT_EQ(snap_to_grid(1.0625, m8), 1.0f);  // midpoint of 1 and 1.125
  EXPECT_EQ(snap_to_grid(460.0, m8), 448.0f);
  EXPECT_EQ(signed_grid_values(Grid::FP8).size(), 253u);
  EXPECT_EQ(signed_grid_values(Grid::FP4).size(), 15u);
}

}  // namespace
}  // namespace gridq::quant

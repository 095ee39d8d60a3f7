// Two-tier v2 scale search (quantizer.md §4) against a direct, independent implementation: errors computed by
// dequantizing and brute-force nearest entries (no moments), the window recomputed from the spec's formula.
#include "quant/scale_search_v2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/numerics.h"
#include "gridbook/scale_coding.h"
#include "quant/lattice_codebook.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

const DenseBook& k16_book() {
  static const DenseBook b = [] {
    auto r = gridbook::parse_rung_name("NVFP4_CB_K16", 2);
    auto cb = lattice_codebook(*r);
    EXPECT_TRUE(cb.ok()) << cb.message();
    return DenseBook::from(*cb);
  }();
  return b;
}

// min_k Σ_j q_j (w_j − s·t_kj)² for the sub-vector at column col (brute force); *arg gets the first argmin.
double direct_err(const DenseBook& b, const double* w, const double* q, int col, double s,
                  int* arg = nullptr) {
  const int d = b.sub_dim;
  const int sub = (col / d) % b.n_sub;
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < b.entries[sub]; ++k) {
    double e = 0.0;
    for (int j = 0; j < d; ++j) {
      const double r = w[col + j] - s * b.t[sub][size_t(k) * d + j];
      e += q[col + j] * r * r;
    }
    if (e < best) {
      best = e;
      if (arg) *arg = k;
    }
  }
  return best;
}

double direct_group_err(const DenseBook& b, const double* w, const double* q, int g, double s) {
  double e = 0.0;
  for (int col = 16 * g; col < 16 * g + 16; col += b.sub_dim) e += direct_err(b, w, q, col, s);
  return e;
}

struct Direct {
  int E;
  int c[16];
};

// Steps 2-5 written straight from the text, for one superblock row with positive q.
Direct direct_search(const DenseBook& b, const double* w, const double* q, double m2) {
  double s0[16];
  for (int g = 0; g < 16; ++g) {
    double num = 0, den = 0;
    for (int j = 16 * g; j < 16 * g + 16; ++j) {
      num += q[j] * w[j] * w[j];
      den += q[j];
    }
    s0[g] = std::sqrt(num / (m2 * den));
  }
  std::vector<double> v(s0, s0 + 16);
  std::sort(v.begin(), v.end());
  int lo = static_cast<int>(std::ceil(std::log2(v.front() / 3.75))) + 126;
  int hi = static_cast<int>(std::floor(std::log2(1.5 * v.back()))) + 128;
  lo = std::clamp(lo, 117, 135);
  hi = std::clamp(hi, 117, 135);
  if (hi - lo + 1 > 14) {
    const int center = static_cast<int>(std::floor(std::log2(v[7]))) + 127;
    while (hi - lo + 1 > 14) {  // drop the end farther from the centre; on equal distance keep the lower E
      if (std::abs(hi - center) >= std::abs(lo - center))
        --hi;
      else
        ++lo;
    }
  }
  Direct out{};
  double best_total = std::numeric_limits<double>::infinity();
  for (int E = lo; E <= hi; ++E) {
    double total = 0;
    int cs[16];
    for (int g = 0; g < 16; ++g) {
      double m = std::numeric_limits<double>::infinity();
      for (int c = 0; c < 16; ++c) {
        if (!gridbook::v2_legal(uint8_t(E), c)) continue;
        const double e = direct_group_err(b, w, q, g, gridbook::v2_scale(uint8_t(E), c));
        if (e < m) {
          m = e;
          cs[g] = c;
        }
      }
      total += m;
    }
    if (total < best_total) {
      best_total = total;
      out.E = E;
      std::copy(cs, cs + 16, out.c);
    }
  }
  return out;
}

TEST(ScaleSearchV2, MatchesDirectSearchOnRandomRows) {
  const DenseBook& b = k16_book();
  const int R = 8;
  std::vector<float> Wf = testing::gaussian(size_t(R) * 256, 11);
  std::vector<double> W(R * 256);
  SplitMix64 rng(12);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 256; ++j) {
      // Rows at very different magnitudes and groups with different spreads.
      const double row_sigma = std::pow(10.0, -4.0 + r * 0.8);
      const double grp = 0.3 + 1.5 * ((j / 16) % 5) / 4.0;
      W[r * 256 + j] = static_cast<float>(Wf[r * 256 + j] * row_sigma * grp);
    }
  std::vector<float> q(256);
  for (auto& x : q) x = static_cast<float>(0.1 + rng.uniform());
  std::vector<double> qd(q.begin(), q.end());
  const double m2 = 3.1;
  std::vector<gridbook::V2Plane> planes(R);
  std::vector<uint32_t> idx(R * 64);
  two_tier_search_superblock(W.data(), 256, R, q.data(), b, m2, {}, planes.data(), idx.data());
  for (int r = 0; r < R; ++r) {
    const Direct d = direct_search(b, &W[r * 256], qd.data(), m2);
    EXPECT_EQ(planes[r].E, d.E) << "row " << r;
    for (int g = 0; g < 16; ++g) {
      EXPECT_TRUE(gridbook::v2_legal(planes[r].E, planes[r].c[g]));
      EXPECT_EQ(planes[r].c[g], d.c[g]) << "row " << r << " group " << g;
    }
    // Codes: the q-weighted nearest entries at the chosen scales.
    for (int v = 0; v < 64; ++v) {
      int k = -1;
      direct_err(b, &W[r * 256], qd.data(), 4 * v, gridbook::v2_scale(planes[r].E, planes[r].c[v / 4]), &k);
      EXPECT_EQ(idx[r * 64 + v], uint32_t(k)) << "row " << r << " sub-vector " << v;
    }
  }
}

TEST(ScaleSearchV2, OnlyLegalPairsAcrossMagnitudes) {
  const DenseBook& b = k16_book();
  const int R = 40;
  std::vector<float> g = testing::gaussian(size_t(R) * 256, 21);
  std::vector<double> W(R * 256);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 256; ++j) {
      // 1e-9 .. 1e4, and within a row groups spanning 6 decades (forces the window cap and snap-up).
      const double mag = std::pow(10.0, -9.0 + 13.0 * r / (R - 1)) * std::pow(10.0, -((j / 16) % 7));
      W[r * 256 + j] = g[r * 256 + j] * mag;
    }
  std::vector<float> q(256, 1.0f);
  std::vector<gridbook::V2Plane> planes(R);
  two_tier_search_superblock(W.data(), 256, R, q.data(), b, 2.5, {}, planes.data(), nullptr);
  for (int r = 0; r < R; ++r) {
    EXPECT_GE(planes[r].E, 117);
    EXPECT_LE(planes[r].E, 135);
    for (int gi = 0; gi < 16; ++gi)
      EXPECT_TRUE(gridbook::v2_legal(planes[r].E, planes[r].c[gi]))
          << "row " << r << " E " << int(planes[r].E) << " c " << int(planes[r].c[gi]);
  }
}

TEST(ScaleSearchV2, ZeroRules) {
  const DenseBook& b = k16_book();
  std::vector<double> W(3 * 256, 0.0);
  std::vector<float> g = testing::gaussian(2 * 256, 31);
  for (int j = 0; j < 256; ++j) {
    W[256 + j] = g[j] * 0.05;
    W[512 + j] = g[256 + j] * 0.05;
  }
  for (int j = 3 * 16; j < 4 * 16; ++j) W[256 + j] = 0.0;    // row 1: group 3 all zero
  for (int j = 5 * 16; j < 6 * 16; ++j) W[512 + j] *= 1e-7;  // row 2: group 5 far below the reachable set
  std::vector<float> q(256, 1.0f);
  std::vector<double> qd(256, 1.0);
  std::vector<gridbook::V2Plane> planes(3);
  std::vector<uint32_t> idx(3 * 64);
  two_tier_search_superblock(W.data(), 256, 3, q.data(), b, 2.5, {}, planes.data(), idx.data());
  // All-zero superblock: E = 118, every nibble 0, codes = the entry nearest to zero.
  EXPECT_EQ(planes[0].E, 118);
  for (int gi = 0; gi < 16; ++gi) EXPECT_EQ(planes[0].c[gi], 0);
  for (int v = 0; v < 64; ++v) {
    int k = -1;
    direct_err(b, W.data(), qd.data(), 4 * v, gridbook::v2_scale(118, 0), &k);
    EXPECT_EQ(idx[v], uint32_t(k));
  }
  // All-zero group: the lowest legal code of the superblock's E.
  EXPECT_EQ(planes[1].c[3], gridbook::v2_lowest_legal_code(planes[1].E));
  // A group below the reachable set snaps up to the smallest reachable scale (never clips to zero).
  EXPECT_EQ(planes[2].c[5], gridbook::v2_lowest_legal_code(planes[2].E));
  EXPECT_GT(gridbook::v2_scale(planes[2].E, planes[2].c[5]), 0.0f);
}

TEST(ScaleSearchV2, PilotMatchesDirectComputation) {
  const DenseBook& b = k16_book();
  const int R = 6, C = 512;
  std::vector<float> g = testing::gaussian(size_t(R) * C, 41);
  std::vector<double> W(g.begin(), g.end());
  for (int j = 0; j < 16; ++j) W[j] = 0.0;  // one all-zero group is skipped
  std::vector<float> q(C);
  SplitMix64 rng(42);
  for (auto& x : q) x = static_cast<float>(0.2 + rng.uniform());
  std::vector<double> qd(q.begin(), q.end());
  TwoTierOptions opt;
  opt.pilot_rows = 4;  // rows 4 and 5 must not count
  const double m2 = pilot_m2(W.data(), C, R, C, q.data(), b, opt);
  double num = 0, den = 0;
  for (int r = 0; r < 4; ++r)
    for (int gi = 0; gi < C / 16; ++gi) {
      const double* w = &W[r * C];
      double amax = 0;
      for (int j = 16 * gi; j < 16 * gi + 16; ++j) amax = std::max(amax, std::fabs(w[j]));
      if (amax == 0) continue;
      double best = std::numeric_limits<double>::infinity(), bs = 0;
      for (int i = 0; i < 16; ++i) {
        const double L = 6.0 - 2.0 * i / 15.0;
        const double s = e4m3_to_f32(f32_to_e4m3_rne(static_cast<float>(amax / L)));
        const double e = direct_group_err(b, w, qd.data(), gi, s);
        if (e < best) {
          best = e;
          bs = s;
        }
      }
      for (int col = 16 * gi; col < 16 * gi + 16; col += 4) {
        int k = -1;
        direct_err(b, w, qd.data(), col, bs, &k);
        for (int j = 0; j < 4; ++j) {
          const double t = b.t[(col / 4) % 2][k * 4 + j];
          num += qd[col + j] * t * t;
          den += qd[col + j];
        }
      }
    }
  EXPECT_NEAR(m2, num / den, 1e-12 * (num / den));
  EXPECT_GT(m2, 0.25);
  EXPECT_LT(m2, 36.0);
}

TEST(ScaleSearchV2, Fp8RowScaleNoWorseThanTheSweep) {
  auto r = gridbook::parse_rung_name("FP8_CB_K32", 1);
  auto cb = lattice_codebook(*r);
  ASSERT_TRUE(cb.ok()) << cb.message();
  const DenseBook b = DenseBook::from(*cb);
  const int R = 4, C = 256;
  std::vector<float> g = testing::gaussian(size_t(R) * C, 51);
  std::vector<double> W(g.begin(), g.end());
  for (int j = 0; j < C; ++j) W[3 * C + j] = 0.0;
  std::vector<float> q(C, 1.0f);
  std::vector<double> qd(C, 1.0);
  std::vector<float> s(R);
  fp8cb_row_scales(W.data(), C, R, C, q.data(), b, 2, s.data());
  EXPECT_EQ(s[3], 1.0f);
  for (int row = 0; row < 3; ++row) {
    auto row_err = [&](double sc) {
      double e = 0;
      for (int col = 0; col < C; col += 2) e += direct_err(b, &W[row * C], qd.data(), col, sc);
      return e;
    };
    double amax = 0;
    for (int j = 0; j < C; ++j) amax = std::max(amax, std::fabs(W[row * C + j]));
    const double chosen = row_err(s[row]);
    for (int i = 0; i < 16; ++i) {
      const double L = 448.0 - (448.0 - 448.0 * 4 / 6) * i / 15.0;
      EXPECT_LE(chosen, row_err(static_cast<float>(amax / L)) * (1 + 1e-12))
          << "row " << row << " candidate " << i;
    }
  }
}

}  // namespace
}  // namespace gridq::quant

namespace gridq::quant {
namespace {

gridbook::Codebook rung_codebook(const char* name, int layout) {
  auto r = gridbook::parse_rung_name(name, layout);
  EXPECT_TRUE(r.ok()) << r.message();
  auto cb = lattice_codebook(*r);
  EXPECT_TRUE(cb.ok()) << cb.message();
  return *cb;
}

DenseBook rung_book(const char* name, int layout) { return DenseBook::from(rung_codebook(name, layout)); }

double grid_amax(const char* rung) { return rung[0] == 'F' ? 448.0 : 6.0; }  // FP8_CB_* : NVFP4_CB_*

// The pruned nearest search must give the exhaustive scan's indices bit for bit: every rung, tables in
// lattice order and shuffled (learned tables need not be sorted), weights at many magnitudes, importances
// with zeros, and sub-vectors that sit exactly on a scaled entry or halfway between two (ties).
TEST(ScaleSearchV2, PrunedNearestEqualsExhaustiveScan) {
  const std::pair<const char*, int> rungs[] = {{"NVFP4_CB_K12", 2}, {"NVFP4_CB_K16", 2}, {"NVFP4_CB_K20", 2},
                                               {"NVFP4_CB_K24", 2}, {"FP8_CB_K32", 1}};
  int cases = 0, exact_hits = 0;
  for (const auto& [name, layout] : rungs) {
    for (int shuffled = 0; shuffled < 2; ++shuffled) {
      SCOPED_TRACE(std::string(name) + (shuffled ? " shuffled" : " lattice order"));
      gridbook::Codebook cb = rung_codebook(name, layout);
      SplitMix64 rng(77 + shuffled);
      if (shuffled) {  // a Fisher-Yates permutation of every sub-table's entries
        const int d = cb.rung.sub_dim();
        for (auto& t : cb.sub)
          for (size_t k = t.size() / d - 1; k > 0; --k) {
            const size_t o = static_cast<size_t>(rng.uniform() * double(k + 1)) % (k + 1);
            for (int j = 0; j < d; ++j) std::swap(t[k * d + j], t[o * d + j]);
          }
      }
      const DenseBook b = DenseBook::from(cb);
      const int d = b.sub_dim, nv = 512;
      std::vector<double> w(size_t(nv) * d), q(size_t(nv) * d), s(nv);
      for (int rep = 0; rep < 6; ++rep) {
        for (int v = 0; v < nv; ++v) {
          s[v] = std::ldexp(0.5 + rng.uniform(), -12 + 3 * rep);
          const int sub = v % b.n_sub;
          const int k = static_cast<int>(rng.uniform() * b.entries[sub]) % b.entries[sub];
          const int k2 = static_cast<int>(rng.uniform() * b.entries[sub]) % b.entries[sub];
          const int kind = v % 4;  // 0: random, 1: exactly on an entry, 2: midway between two, 3: random, q0 = 0
          for (int j = 0; j < d; ++j) {
            const double t = b.t[sub][size_t(k) * d + j], t2 = b.t[sub][size_t(k2) * d + j];
            double x = s[v] * (2.0 * rng.uniform() - 1.0) * (grid_amax(name) * 1.2);
            if (kind == 1) x = s[v] * t;
            if (kind == 2) x = s[v] * 0.5 * (t + t2);
            w[size_t(v) * d + j] = x;
            q[size_t(v) * d + j] = (kind == 3 && j == 0) ? 0.0 : (rep % 2 ? 1.0 : 0.05 + rng.uniform());
          }
          exact_hits += kind == 1;
        }
        std::vector<uint32_t> fast(nv), all(nv);
        nearest_entries(w.data(), q.data(), nv, s.data(), b, fast.data());
        nearest_entries_exhaustive(w.data(), q.data(), nv, s.data(), b, all.data());
        for (int v = 0; v < nv; ++v) ASSERT_EQ(fast[v], all[v]) << "rep " << rep << " sub-vector " << v;
        cases += nv;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 2 * 6 * 512);
  EXPECT_GT(exact_hits, 1000);
}

// The whole two-tier search with the largest table against the direct search written from the text.
TEST(ScaleSearchV2, K24MatchesDirectSearch) {
  const DenseBook b = rung_book("NVFP4_CB_K24", 2);
  const int R = 2;
  std::vector<float> Wf = testing::gaussian(size_t(R) * 256, 31);
  std::vector<double> W(Wf.begin(), Wf.end());
  std::vector<float> q(256);
  SplitMix64 rng(32);
  for (auto& x : q) x = static_cast<float>(0.1 + rng.uniform());
  std::vector<double> qd(q.begin(), q.end());
  const double m2 = 3.1;
  std::vector<gridbook::V2Plane> planes(R);
  std::vector<uint32_t> idx(size_t(R) * 64);
  TwoTierOptions o;
  o.refits = 0;  // direct_search is steps 2-5
  two_tier_search_superblock(W.data(), 256, R, q.data(), b, m2, o, planes.data(), idx.data());
  for (int r = 0; r < R; ++r) {
    const Direct dref = direct_search(b, &W[r * 256], qd.data(), m2);
    EXPECT_EQ(planes[r].E, dref.E) << "row " << r;
    for (int g = 0; g < 16; ++g) EXPECT_EQ(planes[r].c[g], dref.c[g]) << "row " << r << " group " << g;
  }
}

}  // namespace
}  // namespace gridq::quant

// Sampler: seeded reproducibility, top-k / top-p / min-p masks against brute-force definitions, the
// empirical distribution, penalties and stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/sampler.h"

namespace gridq::runtime {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Brute force: softmax in double with temperature, then each filter by its definition.
std::vector<double> brute(const std::vector<float>& l, const SamplingParams& p) {
  const size_t V = l.size();
  std::vector<double> pr(V);
  double mx = -1e300, z = 0;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  for (size_t i = 0; i < V; ++i) z += (pr[i] = std::exp((l[i] - mx) / p.temperature));
  for (auto& x : pr) x /= z;
  std::vector<bool> keep(V, true);
  if (p.top_k > 0)
    for (size_t i = 0; i < V; ++i) {
      int greater = 0;
      for (size_t j = 0; j < V; ++j) greater += pr[j] > pr[i];
      keep[i] = greater < p.top_k;
    }
  if (p.top_p < 1.0f) {
    double kept_total = 0;
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) kept_total += pr[i];
    std::vector<bool> k2 = keep;
    for (size_t i = 0; i < V; ++i) {
      if (!keep[i]) continue;
      double before = 0;  // mass of kept tokens strictly more likely than i
      for (size_t j = 0; j < V; ++j)
        if (keep[j] && pr[j] > pr[i]) before += pr[j] / kept_total;
      k2[i] = before < p.top_p;
    }
    keep = k2;
  }
  if (p.min_p > 0.0f) {
    double top = 0;
    for (size_t i = 0; i < V; ++i) top = std::max(top, pr[i]);
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && pr[i] >= p.min_p * top;
  }
  double total = 0;
  for (size_t i = 0; i < V; ++i)
    if (keep[i]) total += pr[i];
  std::vector<double> out(V, 0.0);
  for (size_t i = 0; i < V; ++i)
    if (keep[i]) out[i] = pr[i] / total;
  return out;
}

TEST(Sampler, FiltersMatchBruteForce) {
  int cases = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    auto l = random_logits(64, seed);
    for (int k : {0, 1, 5, 20})
      for (float tp : {1.0f, 0.9f, 0.5f, 0.05f})
        for (float mp : {0.0f, 0.05f, 0.3f})
          for (float t : {0.7f, 1.0f, 1.5f}) {
            SamplingParams p;
            p.temperature = t;
            p.top_k = k;
            p.top_p = tp;
            p.min_p = mp;
            auto got = filtered_probs(l, p);
            auto want = brute(l, p);
            for (size_t i = 0; i < l.size(); ++i) {
              ASSERT_EQ(got[i] > 0, want[i] > 0) << "seed " << seed << " k " << k << " p " << tp << " min_p " << mp << " i " << i;
              ASSERT_NEAR(got[i], want[i], 1e-12);
            }
            ++cases;
          }
  }
  EXPECT_GT(cases, 1000);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  auto l = random_logits(100, 7);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(l, {}));
    tb.push_back(b.sample(l, {}));
    tc.push_back(c.sample(l, {}));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, EmpiricalDistributionMatches) {
  std::vector<float> l = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 9;
  Sampler s(p);
  auto want = filtered_probs(l, p);
  std::vector<int> count(l.size(), 0);
  const int N = 40000;
  for (int i = 0; i < N; ++i) ++count[static_cast<size_t>(s.sample(l, {}))];
  for (size_t i = 0; i < l.size(); ++i) {
    const double sd = std::sqrt(want[i] * (1 - want[i]) / N);
    EXPECT_NEAR(count[i] / static_cast<double>(N), want[i], 5 * sd) << i;
  }
}

TEST(Sampler, GreedyIsArgmax) {
  auto l = random_logits(50, 3);
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l, {}), argmax(l));
}

TEST(Sampler, Penalties) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  std::vector<int32_t> hist = {0, 1, 1, 3, 3, 3};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  auto a = l;
  apply_penalties(a, hist, p);
  EXPECT_FLOAT_EQ(a[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(a[1], -4.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(a[2], 1.0f);   // unseen: untouched
  EXPECT_FLOAT_EQ(a[3], 0.25f);
  SamplingParams q;
  q.presence_penalty = 0.5f;
  q.frequency_penalty = 0.25f;
  auto b = l;
  apply_penalties(b, hist, q);
  EXPECT_FLOAT_EQ(b[0], 2.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(b[1], -2.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(b[2], 1.0f);
  EXPECT_FLOAT_EQ(b[3], 0.5f - 0.5f - 0.75f);
}

TEST(Sampler, StopStringsAndTokens) {
  SamplingParams p;
  p.stop_strings = {"\n\n", "END"};
  p.stop_token_ids = {0, 5};
  Sampler s(p);
  EXPECT_EQ(s.stop_string_cut("abc"), -1);
  EXPECT_EQ(s.stop_string_cut("abc\n\nxyz"), 3);
  EXPECT_EQ(s.stop_string_cut("aEND\n\n"), 1);
  EXPECT_TRUE(s.is_stop_token(5));
  EXPECT_FALSE(s.is_stop_token(4));
}

TEST(Sampler, RngIsXoshiroFromSplitmix) {
  // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c): the first output is
  // 0xE220A8397B1DCDAF; xoshiro256** state = the first four outputs.
  uint64_t x = 0;
  auto sm = [&x]() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  EXPECT_EQ(sm(), 0xE220A8397B1DCDAFull);
  Rng r(0);
  Rng r2(0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(r.next(), r2.next());
  double u = Rng(5).uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

}  // namespace
}  // namespace gridq::runtime

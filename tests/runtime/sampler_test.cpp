// Sampler: the algorithm of runtime/sampler.h step by step. Masks against brute-force definitions, the
// filter order, one uniform per token through the inverse CDF, the empirical distribution, greedy ties,
// penalties in both windows, logit bias, banned ids, raw-model logprobs, stop strings, and the RNG's golden
// values (what a device port is checked against).
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <tuple>

namespace gridq::runtime {
namespace {

std::vector<double> scores(const std::vector<float>& l) { return {l.begin(), l.end()}; }

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
            auto got = filtered_probs(scores(l), p);
            auto want = brute(l, p);
            for (size_t i = 0; i < l.size(); ++i) {
              ASSERT_EQ(got[i] > 0, want[i] > 0)
                  << "seed " << seed << " k " << k << " p " << tp << " min_p " << mp << " i " << i;
              ASSERT_NEAR(got[i], want[i], 1e-12);
            }
            ++cases;
          }
  }
  EXPECT_GT(cases, 1000);
}

TEST(Sampler, TopKOffValuesAndFilterOrder) {
  auto l = random_logits(40, 11);
  SamplingParams off;
  const auto base = filtered_probs(scores(l), off);
  for (int k : {-1, 0, 40, 1000}) {
    SamplingParams p;
    p.top_k = k;
    EXPECT_EQ(filtered_probs(scores(l), p), base) << k;
  }
  // w (T = 1, max first) = 1, 0.6 and twenty times 0.05: top_p 0.6 of the total 2.6 keeps two ids; min_p 0.1
  // then keeps both. The other order (min_p first: total 1.6, 0.6 of it is 0.96) would keep one.
  std::vector<float> w = {1.0f, 0.6f};
  w.resize(22, 0.05f);
  std::vector<float> lw;
  for (float x : w) lw.push_back(std::log(x));
  SamplingParams p;
  p.top_p = 0.6f;
  p.min_p = 0.1f;
  auto pr = filtered_probs(scores(lw), p);
  EXPECT_GT(pr[0], 0.0);
  EXPECT_GT(pr[1], 0.0);
  for (size_t i = 2; i < pr.size(); ++i) EXPECT_EQ(pr[i], 0.0);
  // Ties at the top-k boundary keep the lower id.
  SamplingParams k2;
  k2.top_k = 2;
  auto tie = filtered_probs(std::vector<double>{0.0, 1.0, 0.0, 1.0, 1.0}, k2);
  EXPECT_EQ(tie, (std::vector<double>{0.0, 0.5, 0.0, 0.5, 0.0}));
}

// filtered_probs orders a row's weights by a radix sort: the same probabilities, bit for bit, as the order
// of a comparison sort on (w descending, id ascending) gives (that sort, written out here), on rows with
// runs of equal weights, banned ids (w = 0) and every filter, up to a 100k vocabulary.
std::vector<double> filtered_by_comparison_sort(std::span<const double> s, const SamplingParams& p) {
  const size_t V = s.size();
  double m = -INFINITY;
  for (double x : s) m = std::max(m, x);
  std::vector<double> w(V);
  for (size_t i = 0; i < V; ++i) w[i] = std::exp((s[i] - m) / static_cast<double>(p.temperature));
  std::vector<int32_t> order(V);
  for (size_t i = 0; i < V; ++i) order[i] = static_cast<int32_t>(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return w[size_t(a)] > w[size_t(b)] || (w[size_t(a)] == w[size_t(b)] && a < b);
  });
  size_t n = p.top_k > 0 && size_t(p.top_k) < V ? size_t(p.top_k) : V;
  if (p.top_p < 1.0f) {
    double kept = 0.0, acc = 0.0;
    for (size_t j = 0; j < n; ++j) kept += w[size_t(order[j])];
    size_t k = 0;
    while (k < n) {
      acc += w[size_t(order[k++])];
      if (acc >= static_cast<double>(p.top_p) * kept) break;
    }
    n = std::max<size_t>(k, 1);
  }
  if (p.min_p > 0.0f) {
    size_t k = 0;
    while (k < n && w[size_t(order[k])] >= static_cast<double>(p.min_p) * w[size_t(order[0])]) ++k;
    n = std::max<size_t>(k, 1);
  }
  for (size_t j = n; j < V; ++j) w[size_t(order[j])] = 0.0;
  double total = 0.0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

TEST(Sampler, FilteredProbsEqualTheComparisonSortsOrder) {
  std::mt19937 g(7);
  int cases = 0;
  for (size_t V : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{100352}}) {
    for (float spread : {0.0f, 0.3f, 4.0f}) {  // 0: every weight equal
      std::normal_distribution<float> d(0.0f, spread > 0.0f ? spread : 1.0f);
      std::vector<double> s(V);
      for (size_t i = 0; i < V; ++i) s[i] = spread > 0.0f ? d(g) : 0.5;
      for (size_t i = 0; i + 3 < V; i += 5) s[i + 3] = s[i];  // runs of equal weights
      for (size_t i = 1; i < V; i += 97) s[i] = -std::numeric_limits<double>::infinity();  // banned
      for (const auto& [k, tp, mp] :
           {std::tuple{0, 0.9f, 0.0f}, std::tuple{50, 1.0f, 0.0f}, std::tuple{0, 0.5f, 0.05f},
            std::tuple{5, 0.95f, 0.0f}, std::tuple{0, 1.0f, 0.2f}}) {
        SamplingParams p;
        p.temperature = 0.7f, p.top_k = k, p.top_p = tp, p.min_p = mp;
        ASSERT_EQ(filtered_probs(s, p), filtered_by_comparison_sort(s, p))
            << "V " << V << " spread " << spread << " top_k " << k << " top_p " << tp << " min_p " << mp;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 75);
}

TEST(Sampler, PickTokenIsInverseCdfOverIdsAscending) {
  const std::vector<double> pr = {0.5, 0.0, 0.25, 0.25};
  EXPECT_EQ(pick_token(pr, 0.0), 0);
  EXPECT_EQ(pick_token(pr, 0.4999), 0);
  EXPECT_EQ(pick_token(pr, 0.5), 2);
  EXPECT_EQ(pick_token(pr, 0.75), 3);
  EXPECT_EQ(pick_token(pr, 0.9999999), 3);
  EXPECT_EQ(pick_token(std::vector<double>{0.3, 0.3, 0.0}, 0.9), 1);  // rounding shortfall: last candidate
  EXPECT_EQ(pick_token(std::vector<double>{0.0, 0.0}, 0.5), 0);
}

TEST(Sampler, OneUniformPerTokenThroughTheDocumentedSteps) {
  // The whole contract, replayed by hand: scores, filters, then pick_token with the next uniform of a second
  // Rng from the same seed. A kernel that draws a different number of uniforms, or picks differently, fails.
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 30;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.1f;
  p.logit_bias = {{3, 2.5f}, {7, -1.0f}};
  p.seed = 77;
  Sampler s(p);
  Rng ref(p.seed);
  const std::vector<int32_t> prompt = {1, 2, 3, 2};
  const std::vector<int32_t> banned = {5};
  std::vector<int32_t> gen;
  for (int step = 0; step < 300; ++step) {
    auto l = random_logits(50, 1000 + static_cast<uint32_t>(step));
    const int32_t want =
        pick_token(filtered_probs(sampling_scores(l, prompt, gen, banned, p), p), ref.uniform());
    const int32_t got = s.sample(l, prompt, gen, banned).token;
    ASSERT_EQ(got, want) << step;
    ASSERT_NE(got, 5);
    gen.push_back(got);
  }
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
    ta.push_back(a.sample(l, {}, {}).token);
    tb.push_back(b.sample(l, {}, {}).token);
    tc.push_back(c.sample(l, {}, {}).token);
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
  auto want = filtered_probs(scores(l), p);
  std::vector<int> count(l.size(), 0);
  const int N = 40000;
  for (int i = 0; i < N; ++i) ++count[static_cast<size_t>(s.sample(l, {}, {}).token)];
  for (size_t i = 0; i < l.size(); ++i) {
    const double sd = std::sqrt(want[i] * (1 - want[i]) / N);
    EXPECT_NEAR(count[i] / static_cast<double>(N), want[i], 5 * sd) << i;
  }
  // top_k 1 leaves the argmax only.
  p.top_k = 1;
  Sampler k1(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(k1.sample(l, {}, {}).token, 2);
}

TEST(Sampler, GreedyLogprobsBannedAndBias) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  auto t = s.sample(logits, {}, {}, {}, 3);
  EXPECT_EQ(t.token, 1);  // tie between 1 and 3 goes to the lower id
  EXPECT_EQ(argmax(logits), 1);
  double lse = 0;
  for (float x : logits) lse += std::exp(static_cast<double>(x));
  lse = std::log(lse);
  EXPECT_NEAR(t.logprob, 3.0 - lse, 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 2);
  EXPECT_NEAR(t.top[2].second, 2.0 - lse, 1e-6);
  // Banned ids are never chosen; logit_bias moves the choice, but logprobs stay the raw model's.
  std::vector<int32_t> banned = {1, 3};
  EXPECT_EQ(s.sample(logits, {}, {}, banned).token, 2);
  SamplingParams b;
  b.temperature = 0.0f;
  b.logit_bias[4] = 100.0f;
  b.logit_bias[99] = 100.0f;  // outside the vocabulary: ignored
  auto tb = Sampler(b).sample(logits, {}, {}, {}, 1);
  EXPECT_EQ(tb.token, 4);
  EXPECT_NEAR(tb.logprob, -1.0 - lse, 1e-6);
  EXPECT_EQ(tb.top[0].first, 1);
  // Everything banned: token 0, at any temperature.
  std::vector<int32_t> all = {0, 1, 2, 3, 4};
  SamplingParams warm;
  EXPECT_EQ(Sampler(warm).sample(logits, {}, {}, all).token, 0);
  EXPECT_EQ(s.sample(logits, {}, {}, all).token, 0);
}

// Step 4's allowed mask (structured outputs): only ids whose bit is set can come out, greedy or sampled; a
// mask equal to "everything" changes nothing (same uniform, same token); ids past its end are refused; the
// reported logprobs stay the raw model's.
TEST(Sampler, AllowedMaskRestrictsEveryPath) {
  const size_t V = 200;
  auto logits = random_logits(V, 7);
  std::vector<uint64_t> allowed((V + 63) / 64, 0);
  const std::vector<int32_t> ok = {3, 64, 65, 130, 199};
  for (int32_t id : ok) allowed[id >> 6] |= uint64_t{1} << (id & 63);
  auto is_ok = [&](int32_t t) { return std::find(ok.begin(), ok.end(), t) != ok.end(); };

  SamplingParams g;
  g.temperature = 0.0f;
  SamplePlan pg = Sampler(g).plan(V, {}, {});
  pg.allowed = allowed;
  int32_t best = ok[0];
  for (int32_t id : ok)
    if (logits[id] > logits[best]) best = id;
  auto tg = Sampler::run(pg, logits);
  EXPECT_EQ(tg.token, best);
  const double unmasked_lp = Sampler::run(Sampler(g).plan(V, {}, {}, {}, 0), logits).logprob;
  EXPECT_LT(tg.logprob, unmasked_lp + 1e-9);  // the raw model's logprob of the masked choice

  for (float temp : {0.7f, 1.5f}) {
    SamplingParams p;
    p.temperature = temp;
    p.top_p = 0.9f;
    p.seed = 11;
    Sampler a(p), b(p), full(p), plain(p);
    for (int i = 0; i < 200; ++i) {
      SamplePlan pa = a.plan(V, {}, {}), pb = b.plan(V, {}, {});
      pa.allowed = allowed;
      pb.allowed = allowed;
      const int32_t ta = Sampler::run(pa, logits).token;
      EXPECT_TRUE(is_ok(ta)) << ta;
      EXPECT_EQ(ta, Sampler::run(pb, logits).token);  // seeded: deterministic
      SamplePlan pf = full.plan(V, {}, {}), pp = plain.plan(V, {}, {});
      pf.allowed.assign((V + 63) / 64, ~uint64_t{0});
      EXPECT_EQ(Sampler::run(pf, logits).token, Sampler::run(pp, logits).token);
    }
  }
  // A mask shorter than the vocabulary refuses the ids past its end.
  SamplePlan ps = Sampler(g).plan(V, {}, {});
  ps.allowed = {~uint64_t{0}};
  EXPECT_LT(Sampler::run(ps, logits).token, 64);
  // Banned edits and the mask combine: the best allowed id not banned.
  std::vector<int32_t> ban = {best};
  SamplePlan pb = Sampler(g).plan(V, {}, {}, ban);
  pb.allowed = allowed;
  const int32_t second = Sampler::run(pb, logits).token;
  EXPECT_TRUE(is_ok(second));
  EXPECT_NE(second, best);
}

TEST(Sampler, PenaltiesInBothWindows) {
  const std::vector<double> l = {2.0, -2.0, 1.0, 0.5, 4.0};
  const std::vector<int32_t> prompt = {0, 4}, gen = {1, 1, 3, 3, 3};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  auto a = l;
  apply_penalties(a, prompt, gen, p);
  EXPECT_EQ(a, (std::vector<double>{1.0, -4.0, 1.0, 0.25, 2.0}));  // on prompt and generated ids alike
  SamplingParams q;
  q.presence_penalty = 0.5f;
  q.frequency_penalty = 0.25f;
  auto b = l;
  apply_penalties(b, prompt, gen, q);  // gridq generate: the prompt counts too
  EXPECT_EQ(
      b, (std::vector<double>{2.0 - 0.5 - 0.25, -2.0 - 0.5 - 0.5, 1.0, 0.5 - 0.5 - 0.75, 4.0 - 0.5 - 0.25}));
  q.penalties_count_prompt = false;  // OpenAI/vLLM: generated tokens only
  auto c = l;
  apply_penalties(c, prompt, gen, q);
  EXPECT_EQ(c, (std::vector<double>{2.0, -2.0 - 0.5 - 0.5, 1.0, 0.5 - 0.5 - 0.75, 4.0}));
  q.repetition_penalty = 2.0f;  // ... while repetition still sees the prompt
  auto d = l;
  apply_penalties(d, prompt, gen, q);
  EXPECT_EQ(d, (std::vector<double>{1.0, -4.0 - 0.5 - 0.5, 1.0, 0.25 - 0.5 - 0.75, 2.0}));
  // Out-of-vocabulary ids are ignored.
  auto e = l;
  const std::vector<int32_t> odd = {-1, 5, 1000};
  apply_penalties(e, odd, odd, p);
  EXPECT_EQ(e, l);
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

TEST(Sampler, RngGoldenValues) {
  // splitmix64 seeded with 0 (Vigna's splitmix64.c) starts 0xE220A8397B1DCDAF; xoshiro256** (Vigna's
  // xoshiro256starstar.c) from the first four splitmix64 outputs gives these. A device port must match them.
  uint64_t x = 0;
  auto sm = [&x]() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  EXPECT_EQ(sm(), 0xE220A8397B1DCDAFull);
  Rng r0(0);
  EXPECT_EQ(r0.next(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(r0.next(), 0xbf6e1f784956452aull);
  EXPECT_EQ(r0.next(), 0x1a5f849d4933e6e0ull);
  Rng r42(42);
  EXPECT_EQ(r42.next(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(r42.next(), 0x6104d9866d113a7eull);
  EXPECT_EQ(Rng(42).uniform(), static_cast<double>(0x15780b2e0c2ec716ull >> 11) * 0x1.0p-53);
  double u = Rng(5).uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

}  // namespace
}  // namespace gridq::runtime

// Student-vs-teacher metrics (eval/teacher_compare.h) against a float64 hand computation on small synthetic
// logits, and their refusals of non-finite logits and bad targets; split from test_teacher_compare.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/teacher_compare.h"
#include "io/sha256.h"

namespace gridq::eval {
namespace {

// Independent float64 reference for one position, straight from logits (no fp32 log-prob step).
struct Ref {
  double kl, top_p, nll;
  int top1_t, top1_s;
};

Ref reference(const std::vector<double>& t, const std::vector<double>& s, int target) {
  auto softmax = [](const std::vector<double>& z) {
    double mx = z[0];
    for (double v : z) mx = std::max(mx, v);
    std::vector<double> p(z.size());
    double sum = 0.0;
    for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - mx);
    for (double& v : p) v /= sum;
    return p;
  };
  const auto p = softmax(t), q = softmax(s);
  Ref r{0.0, 0.0, -std::log(p[target]), 0, 0};
  for (size_t i = 0; i < p.size(); ++i) {
    r.kl += p[i] * std::log(p[i] / q[i]);
    if (p[i] > p[r.top1_t]) r.top1_t = static_cast<int>(i);
    if (q[i] > q[r.top1_s]) r.top1_s = static_cast<int>(i);
  }
  r.top_p = p[r.top1_t];
  return r;
}

std::vector<float> to_f32(const std::vector<std::vector<double>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

TEST(TeacherCompare, SyntheticLogitsMatchFloat64HandComputation) {
  constexpr int V = 5;
  // pos 0: confident teacher (p0 ~ 0.65), both pick 0.  pos 1: teacher tie 1/2 -> 1 (not confident, p ~
  // 0.45), student picks 2: disagree.  pos 2: uniform teacher (p = 0.2), identical student: KL 0, both pick
  // 0. pos 3: confident teacher on 1, student tie 1/2 -> 1: agree.
  const std::vector<std::vector<double>> t = {
      {2, 0, 0, -1, 0.5}, {1, 3, 3, 0, 0}, {0, 0, 0, 0, 0}, {-1, 5, 0, 0, 0}};
  const std::vector<std::vector<double>> s = {
      {1.5, 0.2, 0, -1, 0.4}, {1, 2, 3, 0, 0}, {0, 0, 0, 0, 0}, {0, 4, 4, 0, 0}};
  const std::vector<int32_t> targets = {0, 2, 4, 1};
  const std::vector<float> tl = to_f32(t), sl = to_f32(s);

  // Hand computation: counts, means and NLL from the float64 reference.
  double kl = 0, kl_c = 0, nll = 0;
  int64_t conf = 0, agree = 0, agree_c = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const Ref r = reference(t[i], s[i], targets[i]);
    kl += r.kl;
    nll += r.nll;
    agree += r.top1_t == r.top1_s;
    if (r.top_p > 0.5) ++conf, kl_c += r.kl, agree_c += r.top1_t == r.top1_s;
  }
  ASSERT_EQ(conf, 2);   // the cases above are what they claim to be
  ASSERT_EQ(agree, 3);  // pos 1 disagrees
  ASSERT_EQ(agree_c, 2);
  ASSERT_GT(kl, 0.01);

  std::vector<float> tlp(tl.size());
  for (size_t i = 0; i < t.size(); ++i) ASSERT_TRUE(log_probs_f32(tl.data() + i * V, V, tlp.data() + i * V));
  EXPECT_EQ(argmax_lowest(tlp.data() + 1 * V, V), 1);  // the tie survives the fp32 log-prob step
  TeacherComparator cmp(V);
  ASSERT_TRUE(cmp.add(0, tlp.data(), sl.data(), targets).ok());
  const TeacherCompareResult r = cmp.finish();
  EXPECT_EQ(r.positions, 4);
  EXPECT_EQ(r.confident_positions, conf);
  EXPECT_EQ(r.top1_matches, agree);
  EXPECT_EQ(r.top1_matches_confident, agree_c);
  EXPECT_DOUBLE_EQ(r.top1_agree, 0.75);
  EXPECT_DOUBLE_EQ(r.top1_agree_confident, 1.0);
  EXPECT_NEAR(r.all_kl, kl / 4, 1e-6 * kl / 4);
  EXPECT_NEAR(r.confident_kl, kl_c / 2, 1e-6 * kl_c / 2 + 1e-12);
  EXPECT_NEAR(r.teacher_mean_nll, nll / 4, 1e-6);
  EXPECT_NEAR(r.teacher_ppl, std::exp(nll / 4), 1e-5);
  // The hash covers exactly the teacher rows as given.
  EXPECT_EQ(r.teacher_sha256, io::sha256_hex(std::span<const uint8_t>(
                                  reinterpret_cast<const uint8_t*>(tlp.data()), tlp.size() * 4)));

  // Streaming: the same positions in two windows give the same bits.
  TeacherComparator cmp2(V);
  const std::span<const int32_t> tg(targets);
  ASSERT_TRUE(cmp2.add(0, tlp.data(), sl.data(), tg.first(1)).ok());
  ASSERT_TRUE(cmp2.add(1, tlp.data() + V, sl.data() + V, tg.subspan(1)).ok());
  const TeacherCompareResult r2 = cmp2.finish();
  EXPECT_EQ(r2.all_kl, r.all_kl);
  EXPECT_EQ(r2.confident_kl, r.confident_kl);
  EXPECT_EQ(r2.teacher_sha256, r.teacher_sha256);

  // No confident position: confident metrics are undefined (NaN), not 0.
  TeacherComparator cmp3(V);
  ASSERT_TRUE(cmp3.add(0, tlp.data() + V, sl.data() + V, tg.subspan(1, 2)).ok());
  const TeacherCompareResult r3 = cmp3.finish();
  EXPECT_EQ(r3.confident_positions, 0);
  EXPECT_TRUE(std::isnan(r3.confident_kl));
  EXPECT_TRUE(std::isnan(r3.top1_agree_confident));
}

TEST(TeacherCompare, RefusesNonFiniteLogitsAndBadTargets) {
  constexpr int V = 3;
  const float t[2 * V] = {0, 1, 2, 0, 1, 2};
  float tlp[2 * V];
  ASSERT_TRUE(log_probs_f32(t, V, tlp));
  ASSERT_TRUE(log_probs_f32(t + V, V, tlp + V));
  const float bad[2 * V] = {0, 1, 2, 0, std::nanf(""), 2};
  const std::vector<int32_t> targets = {1, 2};
  TeacherComparator cmp(V);
  Status st = cmp.add(7, tlp, bad, targets);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("window 7 position 1"), std::string::npos) << st.message();
  TeacherComparator cmp2(V);
  const std::vector<int32_t> out_of_range = {1, 3};
  st = cmp2.add(0, tlp, t, out_of_range);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  const float inf[V] = {0, INFINITY, 1};
  float out[V];
  EXPECT_FALSE(log_probs_f32(inf, V, out));
}

// ---- bundled model ----

}  // namespace
}  // namespace gridq::eval

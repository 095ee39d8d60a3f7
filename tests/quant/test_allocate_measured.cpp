// Measured allocation (allocate.h "Measured allocation", sensitivity.h): the decision logic on synthetic
// sensitivities and check measurements (uniform kept unless a mixed plan measures strictly better, ties to
// uniform, the budget met in exact stored bits), the calibration splits, and the KL probe on the bundled
// model (a model compared with itself is 0; the value does not depend on the thread count).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>

#include "quant/allocate.h"
#include "quant/export.h"
#include "quant/lattice_codebook.h"
#include "quant/pipeline.h"
#include "quant/sensitivity.h"

namespace gridq::quant {
namespace {

const std::vector<std::string> kRungs = {"NVFP4_CB_K12", "NVFP4_CB_K16", "NVFP4_CB_K20", "NVFP4_CB_K24"};

// n units shaped like one routed-expert stack of the bundled model (12 experts, gate/up [256, 512], down
// [512, 256]) with each rung's exact stored bits; proxy cost = `proxy[o]` scaled by the unit index + 1.
std::vector<AllocUnit> stack_units(int n, const std::vector<double>& proxy) {
  std::vector<AllocUnit> units;
  for (int u = 0; u < n; ++u) {
    AllocUnit U;
    U.name = "model.layers." + std::to_string(u + 1) + ".mlp.experts";
    U.params = 12 * 3 * 256 * 512;
    for (size_t o = 0; o < kRungs.size(); ++o) {
      const int64_t b = 12 * (2 * *stored_bits(kRungs[o], 256, 512) + *stored_bits(kRungs[o], 512, 256));
      U.options.push_back({kRungs[o], static_cast<double>(b), proxy[o] * (u + 1)});
    }
    units.push_back(std::move(U));
  }
  return units;
}

// An additive "true" KL with a per-unit sensitivity profile, used as the check measurement.
double additive_kl(const std::vector<std::vector<double>>& s, const std::vector<int>& c) {
  double k = 0;
  for (size_t u = 0; u < c.size(); ++u) k += s[u][static_cast<size_t>(c[u])];
  return k;
}

TEST(AllocateMeasured, UniformPlansAreTheFittingOnes) {
  const auto units = stack_units(3, {4, 2, 1, 0.5});
  const auto at = [&](double b) { return uniform_plans(units, b); };
  ASSERT_EQ(at(2.28125).size(), 2u);  // K12, K16 fit exactly at K16's 73 bytes per superblock
  EXPECT_EQ(at(2.28125)[1].label, "uniform NVFP4_CB_K16");
  EXPECT_EQ(at(2.28125)[1].plan.bpw, 2.28125);
  EXPECT_EQ(at(2.28124).size(), 1u);
  EXPECT_EQ(at(9.0).size(), 4u);
  auto partial = units;
  partial[1].options.erase(partial[1].options.begin() + 1);  // K16 missing from one unit: not uniform
  EXPECT_EQ(uniform_plans(partial, 9.0).size(), 3u);
}

TEST(AllocateMeasured, UniformKeptWhenTheMixedPlanMeasuresWorse) {
  const auto units = stack_units(3, {4, 2, 1, 0.5});
  // Sensitivities say layer 1 matters most: the knapsack moves bits there (K20, K16, K12)...
  const std::vector<std::vector<double>> sens = {{9, 3, 1, 0.5}, {2, 1, 0.6, 0.4}, {1, 0.5, 0.3, 0.2}};
  // ...but the check split measures every mixed plan worse than uniform K16.
  auto check = [&](const std::vector<int>& c) -> Expected<double> {
    const bool k16 = c == std::vector<int>{1, 1, 1};
    return k16 ? 1.0 : 1.5;
  };
  auto m = allocate_measured(units, sens, 2.28125, check);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->candidates[m->chosen].label, "uniform NVFP4_CB_K16");
  EXPECT_EQ(m->plan().choice, (std::vector<int>{1, 1, 1}));
  bool has_measured = false;
  for (const auto& c : m->candidates) has_measured = has_measured || c.label == "measured";
  EXPECT_TRUE(has_measured) << "the measured plan differs from uniform and must be a candidate";
}

TEST(AllocateMeasured, MixedTakenOnlyWhenStrictlyBetterTiesKeepUniform) {
  const auto units = stack_units(3, {4, 2, 1, 0.5});
  const std::vector<std::vector<double>> sens = {{9, 3, 1, 0.5}, {2, 1, 0.6, 0.4}, {1, 0.5, 0.3, 0.2}};
  auto better = allocate_measured(units, sens, 2.28125, [&](const std::vector<int>& c) -> Expected<double> {
    return additive_kl(sens, c);
  });
  ASSERT_TRUE(better.ok()) << better.message();
  EXPECT_EQ(better->candidates[better->chosen].label, "measured");
  EXPECT_LT(better->candidates[better->chosen].check_kl, additive_kl(sens, {1, 1, 1}));
  EXPECT_LE(better->plan().bits, 2.28125 * 3 * units[0].params);

  auto tie = allocate_measured(units, sens, 2.28125,
                               [&](const std::vector<int>&) -> Expected<double> { return 0.25; });
  ASSERT_TRUE(tie.ok()) << tie.message();
  EXPECT_EQ(tie->candidates[tie->chosen].label.rfind("uniform", 0), 0u);
}

TEST(AllocateMeasured, NeverWorseThanTheBestFittingUniformAtThreeBudgets) {
  const auto units = stack_units(3, {5, 2, 1, 0.3});
  const std::vector<std::vector<double>> sens = {{3, 1, 0.4, 0.2}, {6, 2, 0.7, 0.3}, {2, 0.9, 0.5, 0.4}};
  // The check adds an interaction the sensitivities do not see (mixing rungs costs extra).
  auto check = [&](const std::vector<int>& c) -> Expected<double> {
    const bool mixed = c[0] != c[1] || c[1] != c[2];
    return additive_kl(sens, c) + (mixed ? 0.8 : 0.0);
  };
  for (double b : {2.0, 2.28125, 2.5625}) {
    auto m = allocate_measured(units, sens, b, check);
    ASSERT_TRUE(m.ok()) << m.message();
    double best_uniform = INFINITY;
    for (const auto& u : uniform_plans(units, b))
      best_uniform = std::min(best_uniform, *check(u.plan.choice));
    EXPECT_LE(m->candidates[m->chosen].check_kl, best_uniform) << "budget " << b;
    EXPECT_LE(m->plan().bits, b * 3 * units[0].params) << "budget " << b;
  }
}

TEST(AllocateMeasured, RefusesMalformedSensitivitiesAndFailingChecks) {
  const auto units = stack_units(2, {4, 2, 1, 0.5});
  auto ok = [](const std::vector<int>&) -> Expected<double> { return 1.0; };
  EXPECT_FALSE(allocate_measured(units, {{1, 1, 1, 1}}, 2.5, ok).ok());
  EXPECT_FALSE(allocate_measured(units, {{1, 1, 1}, {1, 1, 1, 1}}, 2.5, ok).ok());
  EXPECT_FALSE(allocate_measured(units, {{1, NAN, 1, 1}, {1, 1, 1, 1}}, 2.5, ok).ok());
  EXPECT_FALSE(allocate_measured(units, {{1, -1, 1, 1}, {1, 1, 1, 1}}, 2.5, ok).ok());
  auto bad = [](const std::vector<int>&) -> Expected<double> { return err("probe failed"); };
  EXPECT_FALSE(allocate_measured(units, {{1, 1, 1, 1}, {1, 1, 1, 1}}, 2.5, bad).ok());
  EXPECT_FALSE(allocate_measured(units, {{1, 1, 1, 1}, {1, 1, 1, 1}}, 1.0, ok).ok());  // below K12
}

TEST(AllocateMeasured, SplitsAreTheHoldoutAndEvenlySpacedTrainingSequences) {
  CalibSet c;
  c.n_seq = 32;
  c.seq_len = 4;
  c.holdout.assign(32, 0);
  c.holdout[15] = c.holdout[31] = 1;
  auto s = probe_splits(c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->check, (std::vector<int>{15, 31}));
  EXPECT_EQ(s->sens, (std::vector<int>{0, 16}));
  c.holdout.assign(32, 0);
  EXPECT_FALSE(probe_splits(c).ok());
}

// The bundled model: KL of the teacher with itself is exactly 0, a quantized layer gives KL > 0, and the
// value is bit-identical at 1 and 2 threads.
TEST(KlProbe, ZeroForTheTeacherAndThreadCountIndependent) {
  const std::string dir = std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no bundled model";
  auto m = model::load_model(dir);
  ASSERT_TRUE(m.ok()) << m.message();
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 200, 31, 7, 77, 1000, 12, 3, 4, 5, 6, 7, 8, 9},
                                            {2, 400, 401, 402, 403, 3000, 17, 18}};
  // Layer 1's routed experts as an NVFP4 K12 stack, RTN-encoded (cold inputs: plain nearest).
  auto rung = gridbook::parse_rung_name("NVFP4_CB_K12", 2);
  ASSERT_TRUE(rung.ok());
  auto book = lattice_codebook(*rung);
  ASSERT_TRUE(book.ok()) << book.message();
  std::vector<EncodedTensor> encs;
  for (int e = 0; e < 12; ++e) {
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string name = "model.layers.1.mlp.experts." + std::to_string(e) + "." + p + ".weight";
      auto w = source_weight(*m->checkpoint, name);
      if (!w.ok()) break;
      InputStats in;
      in.name = name;
      in.cols = static_cast<int>(w->shape[1]);
      in.H.assign(static_cast<size_t>(in.cols) * in.cols, 0.0f);
      in.imatrix.assign(static_cast<size_t>(in.cols), 0.0f);
      EncodeParams ep;
      ep.format = "NVFP4_CB_K12";
      ep.encoder = "rtn";
      ep.two_tier.pilot_rows = 8;  // keep the test fast: any valid encoding will do
      ep.two_tier.refits = 0;
      auto enc = encode_tensor(*w, &in, ep, &*book);
      ASSERT_TRUE(enc.ok()) << enc.message();
      encs.push_back(std::move(*enc));
    }
  }
  ASSERT_EQ(encs.size(), 36u);
  auto sc = assemble_tensors(std::move(encs));
  ASSERT_TRUE(sc.ok()) << sc.message();
  ProbeStack st;
  st.layer = 1;
  st.format = "NVFP4_CB_K12";
  st.codebook = &*book;
  for (const StoredTensor& t : sc->tensors) {
    if (t.name.ends_with("gate_up_proj.cb_qweight")) st.gate_up = t.bytes();
    if (t.name.ends_with("down_proj.cb_qweight")) st.down = t.bytes();
  }
  double kl[2] = {0, 0};
  for (int threads : {1, 2}) {
    auto probe = KlProbe::create(*m, seqs, threads);
    ASSERT_TRUE(probe.ok()) << probe.message();
    EXPECT_EQ((*probe)->positions(), 15 + 7);
    auto self = (*probe)->kl({});
    ASSERT_TRUE(self.ok()) << self.message();
    EXPECT_EQ(*self, 0.0);
    const ProbeStack bf16[1] = {ProbeStack{1, "BF16", nullptr, {}, {}, {}, {}}};
    EXPECT_EQ(*(*probe)->kl(bf16), 0.0);
    const ProbeStack one[1] = {st};
    auto q = (*probe)->kl(one);
    ASSERT_TRUE(q.ok()) << q.message();
    kl[threads - 1] = *q;
  }
  EXPECT_GT(kl[0], 0.0);
  EXPECT_EQ(kl[0], kl[1]) << "KL must not depend on the thread count";
  ProbeStack shortened = st;
  shortened.down = st.down.subspan(1);
  auto probe = KlProbe::create(*m, seqs, 1);
  ASSERT_TRUE(probe.ok());
  const ProbeStack bad[1] = {shortened};
  EXPECT_FALSE((*probe)->kl(bad).ok());
}

}  // namespace
}  // namespace gridq::quant

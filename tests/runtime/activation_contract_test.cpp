// EngineOptions::activation_contract (issue 15 item 4) on the CPU engine, over a synthetic gridbook artifact
// (NVFP4-CB v2 routed experts, FP8 W8A8 attention): the default is the artifact's own contract and gives the
// same bits as an explicit w4a4; w4a16 changes the logits (the FP4 QDQ is really skipped) and only the FP4-CB
// matrices' act_bits; the start-up line names the contract; an unknown contract is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "../gridbook/synthetic_artifact.h"
#include "runtime/artifact_weights.h"
#include "runtime/engine.h"

namespace gridq::runtime {
namespace {

namespace fs = std::filesystem;

class ActivationContract : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / fmt::format("gridq_rt_contract_{}", ::getpid())).string();
    fs::remove_all(dir_);
    Status st = testing::make_synthetic_artifact().write(dir_);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<float> run(const std::string& contract, std::string* log = nullptr) {
    EngineOptions eo;
    eo.device = "cpu";
    eo.activation_contract = contract;
    auto e = Engine::open(dir_, eo);
    EXPECT_TRUE(e.ok()) << e.message();
    if (!e.ok()) return {};
    if (log) *log = (*e)->device_log();
    const std::vector<int32_t> ids = {3, 17, 42, 99, 5, 200, 7, 1, 64, 128, 11, 250};
    auto s = (*e)->create_sequence();
    auto lg = (*e)->prefill(s, ids, LogitsMode::kAll);
    EXPECT_TRUE(lg.ok()) << lg.message();
    return lg.ok() ? *lg : std::vector<float>{};
  }
  static inline std::string dir_;
};

TEST_F(ActivationContract, DefaultIsTheArtifactsW4A4AndW4A16Differs) {
  std::string log_default, log_a4, log_a16;
  const auto d = run("", &log_default), a4 = run("w4a4", &log_a4), a16 = run("w4a16", &log_a16);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d, a4);  // the artifact's contract is w4a4
  ASSERT_EQ(d.size(), a16.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < d.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a16[i]));
    max_diff = std::max(max_diff, static_cast<double>(std::abs(d[i] - a16[i])));
  }
  EXPECT_GT(max_diff, 1e-4) << "w4a16 gave the w4a4 logits: the FP4 QDQ was not skipped";
  EXPECT_NE(log_default.find("activation contract w4a4 (the artifact's)"), std::string::npos) << log_default;
  EXPECT_NE(log_a4.find("activation contract w4a4"), std::string::npos) << log_a4;
  EXPECT_NE(log_a16.find("activation contract w4a16 (override"), std::string::npos) << log_a16;
}

TEST_F(ActivationContract, OnlyFp4CbMatricesChange) {
  auto am = load_artifact_model(dir_);
  ASSERT_TRUE(am.ok()) << am.message();
  ModelWeights& w = (*am)->weights;
  const int fp8_bits = w.layers[1].q.act_bits;
  auto n = set_activation_contract(w, "w4a16");
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_GT(*n, 0);
  for (const LayerWeights& l : w.layers)
    for (const auto* v : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (const QMatrix& m : *v) {
        if (m.format == WeightFormat::kCB) {
          EXPECT_EQ(m.act_bits, 16);
        }
      }
  EXPECT_EQ(w.layers[1].q.act_bits, fp8_bits);  // FP8 W8A8 attention keeps its contract
  auto back = set_activation_contract(w, "w4a4");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *n);
  EXPECT_EQ(w.layers[1].expert_down[0].act_bits, 4);
}

TEST_F(ActivationContract, UnknownContractIsRefused) {
  EngineOptions eo;
  eo.device = "cpu";
  eo.activation_contract = "w4a8";
  auto e = Engine::open(dir_, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("w4a8"), std::string::npos) << e.message();
}

TEST(ActivationContractBf16, ModelWithoutCbLayersSaysNothingChanges) {
  EngineOptions eo;
  eo.device = "cpu";
  eo.activation_contract = "w4a16";
  auto e = Engine::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code", eo);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_NE((*e)->device_log().find("nothing changes"), std::string::npos) << (*e)->device_log();
}

}  // namespace
}  // namespace gridq::runtime

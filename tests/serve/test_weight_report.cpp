// The start-up weight report (issue #6 item 5): formats are read from the matrices themselves, grouped per
// format and activation contract, counted exactly, and joined into the model_info label. The model here is
// built by hand, so the expected counts come from its construction, not from the code under test.
#include <gtest/gtest.h>

#include "gridbook/rung.h"
#include "serve/weight_report.h"

namespace gridq::serve {
namespace {

runtime::QMatrix mat(runtime::WeightFormat f, int64_t rows, int64_t cols, int act_bits = 16,
                     const gridbook::Rung* rung = nullptr) {
  runtime::QMatrix m;
  m.format = f;
  m.rows = rows;
  m.cols = cols;
  m.act_bits = act_bits;
  m.rung = rung;
  return m;
}

TEST(WeightReport, GroupsByFormatAndActivationContract) {
  using F = runtime::WeightFormat;
  gridbook::Rung k16;  // NVFP4 product rung, k = 16
  k16.grid = gridbook::Grid::FP4;
  k16.mode = gridbook::Mode::Product;
  k16.k = 16;
  runtime::ModelWeights w;
  w.embed = mat(F::kBF16, 100, 8);
  w.lm_head = mat(F::kBF16, 100, 8);
  for (int l = 0; l < 3; ++l) {
    runtime::LayerWeights lw;
    for (auto* m : {&lw.q, &lw.k, &lw.v, &lw.o}) *m = mat(F::kFP8, 8, 16);
    lw.router = mat(F::kF32, 4, 8);  // g and the shared expert stay absent (rows 0): not counted
    for (int e = 0; e < 4; ++e) {
      lw.expert_gate.push_back(mat(F::kCB, 6, 256, 4, &k16));
      lw.expert_up.push_back(mat(F::kCB, 6, 256, 4, &k16));
      lw.expert_down.push_back(mat(F::kCB, 256, 6, l == 0 ? 8 : 4, &k16));
    }
    w.layers.push_back(std::move(lw));
  }
  const auto uses = weight_format_uses(w);
  ASSERT_EQ(uses.size(), 5u);
  EXPECT_EQ(uses[0].label, "BF16");
  EXPECT_EQ(uses[0].matrices, 2);
  EXPECT_EQ(uses[0].params, 2 * 100 * 8);
  EXPECT_EQ(uses[1].label, "FP8_W8A8");
  EXPECT_EQ(uses[1].act_bits, 8);  // W8A8 quantizes activations whatever act_bits says
  EXPECT_EQ(uses[1].matrices, 12);
  EXPECT_EQ(uses[2].label, "F32");
  EXPECT_EQ(uses[2].matrices, 3);
  EXPECT_EQ(uses[3].label, "NVFP4_CB_K16");
  EXPECT_EQ(uses[3].act_bits, 4);
  EXPECT_EQ(uses[3].matrices, 3 * 4 * 2 + 2 * 4);
  EXPECT_EQ(uses[4].label, "NVFP4_CB_K16");
  EXPECT_EQ(uses[4].act_bits, 8);
  EXPECT_EQ(uses[4].matrices, 4);
  EXPECT_EQ(format_label(uses), "BF16+F32+FP8_W8A8+NVFP4_CB_K16");

  const std::string cb = kernel_line(uses[3]);
  EXPECT_NE(cb.find("weights NVFP4_CB_K16: 32 matrices"), std::string::npos) << cb;
  EXPECT_NE(cb.find("runtime/cpu/cb_rows.cpp"), std::string::npos) << cb;
  EXPECT_NE(cb.find("FP4 group-16"), std::string::npos) << cb;
  EXPECT_NE(kernel_line(uses[1]).find("W8A8"), std::string::npos);
  EXPECT_NE(kernel_line(uses[0]).find("bf16"), std::string::npos);
}

TEST(WeightReport, EmptyModelHasNoFormat) {
  EXPECT_TRUE(weight_format_uses(runtime::ModelWeights{}).empty());
  EXPECT_EQ(format_label({}), "unknown");
}

}  // namespace
}  // namespace gridq::serve

// --budget-bpw pricing (quant/allocate.h) on real encodings of the tiny model, split from test_export.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gridbook/artifact.h"
#include "io/pins.h"
#include "model/loader.h"
#include "pipeline_test_util.h"
#include "quant/allocate.h"
#include "quant/export.h"
#include "quant/fp8_weights.h"
#include "quant/lattice_codebook.h"
#include "quant/pipeline.h"
#include "runtime/engine.h"

namespace gridq::quant {
namespace {

using gridq::testing::kSanitized;
using gridq::testing::repo_path;
using testing::TinyLaguna;

// --budget-bpw pricing on synthetic statistics: every rung of the routed stack is encoded for real, its size
// is the exact stored size (k/8 + 0.28125 bpw for K-rungs v2), its proxy cost falls as k grows, and the
// knapsack picks the largest rung that fits the budget.
TEST(ExportBudget, OptionsArePricedFromRealEncodings) {
  const std::string src = testing::test_tmp_dir("export_budget", "src");
  TinyLaguna o;
  testing::write_tiny_laguna(src, o);
  auto recipe = load_recipe("laguna", repo_path(""));
  auto model = model::load_model(src);
  ASSERT_TRUE(recipe.ok() && model.ok());
  std::vector<SourceTensor> st;
  for (const std::string& n : model->checkpoint->names()) {
    const io::TensorInfo* t = model->checkpoint->find(n);
    st.push_back({n, std::string(io::dtype_name(t->dtype)), t->shape});
  }
  auto plan = make_plan(*recipe, st, false);
  ASSERT_TRUE(plan.ok());
  QuantizeOptions qo;
  qo.budget_bpw = 2.5;
  qo.budget_formats = {"NVFP4_CB_K12", "NVFP4_CB_K16"};  // K20/K24 lattice books take a minute to build
  qo.method = kSanitized ? "rtn" : "";
  auto tasks = resolve_tasks(*recipe, *plan, *model, qo);
  ASSERT_TRUE(tasks.ok()) << tasks.message();
  std::map<std::string, gridbook::Codebook> books;
  for (const char* f : {"NVFP4_CB_K12", "NVFP4_CB_K16"})
    books.emplace(f, *lattice_codebook(*gridbook::parse_rung_name(f, 2)));
  const InputStats wide = testing::synthetic_stats("wide", o.hidden, 300, 16, 31);
  const InputStats narrow = testing::synthetic_stats("narrow", o.moe_inter, 300, 16, 32);
  const LayerCapture cap = testing::synthetic_capture(o, 1, wide, narrow);
  auto units = encode_budget_units(*tasks, 1, cap, *model->checkpoint, books);
  ASSERT_TRUE(units.ok()) << units.message();
  ASSERT_EQ(units->size(), 1u);
  const BudgetUnit& u = units->front();
  EXPECT_EQ(u.unit, "model.layers.1.mlp.experts");
  EXPECT_EQ(u.params, int64_t{o.experts} * 3 * o.moe_inter * o.hidden);
  ASSERT_EQ(u.options.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const int k = 12 + 4 * static_cast<int>(i);
    EXPECT_EQ(u.options[i].bits, u.params * (4 * k + 9) / 32) << k;  // k/8 + 0.28125 bpw, exactly
    EXPECT_EQ(u.options[i].cb_slices.size(), size_t(3 * o.experts));
    if (i > 0) {
      EXPECT_LT(u.options[i].half_trace, u.options[i - 1].half_trace) << k;
    }
  }
  // The non-budget tensors of the layer are encoded without the stack.
  auto base = encode_layer_tensors(*tasks, 1, &cap, *model->checkpoint, books);
  ASSERT_TRUE(base.ok());
  for (const auto& e : *base) {
    EXPECT_FALSE(e.stats.tensor.ends_with("_proj.weight") &&
                 e.stats.tensor.find(".experts.") != std::string::npos)
        << e.stats.tensor;
  }
  // The knapsack over the priced options: 2.5 bpw fits K16 (2.28125) but not more; 2.0 only K12.
  std::vector<AllocUnit> au(1);
  au[0].name = u.unit;
  au[0].params = u.params;
  for (const BudgetOption& op : u.options)
    au[0].options.push_back({op.format, double(op.bits), op.half_trace / 300.0});
  auto ap = allocate(au, 2.5);
  ASSERT_TRUE(ap.ok()) << ap.message();
  EXPECT_EQ(au[0].options[static_cast<size_t>(ap->choice[0])].format, "NVFP4_CB_K16");
  auto tight = allocate(au, 2.0);
  ASSERT_TRUE(tight.ok()) << tight.message();
  EXPECT_EQ(au[0].options[static_cast<size_t>(tight->choice[0])].format, "NVFP4_CB_K12");
  std::filesystem::remove_all(src);
}

}  // namespace
}  // namespace gridq::quant

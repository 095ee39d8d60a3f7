// The fused expert layout (gate_up_proj [E, 2I, H], down_proj [E, H, I]) must give the same forward as the
// per-expert layout holding the same values.
#include <gtest/gtest.h>

#include "parity_util.h"
#include "synthetic_model.h"

namespace gridq::runtime {
namespace {

TEST(FusedExperts, SameLogitsAsPerExpert) {
  testing::SynthModelOptions o;
  o.fused_experts = true;
  o.router_bias = {0.1f, -0.2f, 0.3f, 0.0f};
  auto fused = testing::make_synthetic(o);
  ASSERT_TRUE(fused.engine);
  // Rebuild the same values in the per-expert layout.
  auto store = std::make_shared<testing::TensorStore>();
  const int E = o.experts, I = o.expert_inter, H = o.hidden;
  for (const auto& [name, info] : fused.store->table) {
    auto v = fused.store->get(name);
    if (name.ends_with("experts.gate_up_proj")) {
      const std::string p = name.substr(0, name.size() - std::string("gate_up_proj").size());
      for (int e = 0; e < E; ++e) {
        auto at = v.begin() + static_cast<int64_t>(e) * 2 * I * H;
        store->add(p + std::to_string(e) + ".gate_proj.weight", {I, H}, std::vector<float>(at, at + I * H));
        store->add(p + std::to_string(e) + ".up_proj.weight", {I, H}, std::vector<float>(at + I * H, at + 2 * I * H));
      }
    } else if (name.ends_with("experts.down_proj")) {
      const std::string p = name.substr(0, name.size() - std::string("down_proj").size());
      for (int e = 0; e < E; ++e) {
        auto at = v.begin() + static_cast<int64_t>(e) * H * I;
        store->add(p + std::to_string(e) + ".down_proj.weight", {H, I}, std::vector<float>(at, at + H * I));
      }
    } else {
      store->add(name, info->shape, v);
    }
  }
  auto a = model::adapt(testing::synthetic_config(o), store->table);
  ASSERT_TRUE(a.ok()) << a.message();
  auto w = build_model_weights(a->spec, a->weights);
  ASSERT_TRUE(w.ok());
  auto be = cpu::CpuBackend::create(a->spec, std::move(*w), store);
  ASSERT_TRUE(be.ok());
  auto per = Engine::from_backend(std::move(*be), {});
  std::vector<int32_t> ids = {1, 5, 9, 2, 14, 3, 3, 7};
  auto s1 = fused.engine->create_sequence();
  auto s2 = per->create_sequence();
  auto l1 = fused.engine->prefill(s1, ids, LogitsMode::kAll);
  auto l2 = per->prefill(s2, ids, LogitsMode::kAll);
  ASSERT_TRUE(l1.ok() && l2.ok());
  EXPECT_EQ(*l1, *l2);
}

}  // namespace
}  // namespace gridq::runtime

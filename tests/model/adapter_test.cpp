// Architecture adapters: the tiny Laguna's spec and RoPE values (laguna.md §1.3 worked values), the
// accepted name spellings, and refusal of unknown/missing tensors and unsupported config values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "io/checkpoint.h"
#include "model/loader.h"
#include "tiny_checkpoint.h"

namespace gridq::model {
namespace {

std::string repo(const std::string& rel) { return std::string(GRIDQ_SOURCE_DIR) + "/" + rel; }

using testing::open_tiny;

// YaRN per laguna.md §1.3 in float64 (independent of the fp32 implementation).
std::vector<double> yarn_ref(double theta, int r, double f, double l0, double bf, double bs, int* lo,
                             int* hi) {
  auto corr = [&](double n) { return r * std::log(l0 / (n * 2 * M_PI)) / (2 * std::log(theta)); };
  double low = std::max(std::floor(corr(bf)), 0.0), high = std::min(std::ceil(corr(bs)), r - 1.0);
  *lo = static_cast<int>(low);
  *hi = static_cast<int>(high);
  if (low == high) high += 0.001;
  std::vector<double> out;
  for (int i = 0; i < r / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double ex = std::pow(theta, -2.0 * i / r);
    out.push_back(ex / f * ramp + ex * (1 - ramp));
  }
  return out;
}

TEST(LagunaAdapter, TinyCodeSpec) {
  auto t = open_tiny();
  auto a = adapt(t.config, t.table);
  ASSERT_TRUE(a.ok()) << a.message();
  const ModelSpec& s = a->spec;
  EXPECT_EQ(s.n_layers, 4);
  EXPECT_EQ(s.hidden_size, 512);
  EXPECT_EQ(s.vocab_size, 4096);
  const int heads[4] = {4, 6, 6, 4};
  const AttnKind kinds[4] = {AttnKind::kFull, AttnKind::kSliding, AttnKind::kSliding, AttnKind::kFull};
  for (int l = 0; l < 4; ++l) {
    const auto& L = s.layers[static_cast<size_t>(l)];
    EXPECT_EQ(L.n_heads, heads[l]);
    EXPECT_EQ(L.n_kv_heads, 2);
    EXPECT_EQ(L.attn, kinds[l]);
    EXPECT_EQ(L.window, kinds[l] == AttnKind::kSliding ? 64 : 0);
    EXPECT_EQ(L.gate, GateMode::kPerHead);
    EXPECT_TRUE(L.qk_norm);
    EXPECT_EQ(L.mlp, l == 0 ? MlpKind::kDense : MlpKind::kMoe);
  }
  EXPECT_EQ(s.moe.n_experts, 12);
  EXPECT_EQ(s.moe.top_k, 4);
  EXPECT_FLOAT_EQ(s.moe.routed_scaling, 2.5f);
  EXPECT_TRUE(s.moe.has_bias);
  EXPECT_TRUE(s.moe.renormalize);
  EXPECT_EQ(s.bos_token_id, 0);
  // Full layers: YaRN, r = 64, low 2, high 11, m = 0.1 ln 8 + 1.
  const auto& full = s.layers[0].rope;
  EXPECT_EQ(full.rotary_dim, 64);
  EXPECT_FLOAT_EQ(full.attention_factor, static_cast<float>(1.2079441541679836));
  int lo = 0, hi = 0;
  auto ref = yarn_ref(500000.0, 64, 8.0, 512.0, 32.0, 1.0, &lo, &hi);
  EXPECT_EQ(lo, 2);
  EXPECT_EQ(hi, 11);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(full.inv_freq[i], ref[i], 2e-7 * ref[i] + 1e-12) << i;
  // Sliding layers: plain RoPE over all 128 dims.
  const auto& sl = s.layers[1].rope;
  EXPECT_EQ(sl.rotary_dim, 128);
  EXPECT_FLOAT_EQ(sl.attention_factor, 1.0f);
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(sl.inv_freq[static_cast<size_t>(i)], std::pow(10000.0, -i / 64.0), 1e-7);
  // Worked values for S-2.1 (laguna.md §1.3): low 9, high 18.
  yarn_ref(500000.0, 64, 128.0, 8192.0, 32.0, 1.0, &lo, &hi);
  EXPECT_EQ(lo, 9);
  EXPECT_EQ(hi, 18);
  auto s21 = rope_yarn_inv_freq(500000.0, 64, 128.0, 8192.0, 32.0, 1.0);
  auto s21_ref = yarn_ref(500000.0, 64, 128.0, 8192.0, 32.0, 1.0, &lo, &hi);
  for (size_t i = 0; i < s21.size(); ++i) EXPECT_NEAR(s21[i], s21_ref[i], 2e-7 * s21_ref[i]) << i;
  // Roles: every expert, both ends.
  EXPECT_TRUE(a->weights.contains(roles::expert(3, 11, "down")));
  EXPECT_TRUE(a->weights.contains(roles::kLmHead));
  EXPECT_EQ(a->weights.find(roles::layer(1, roles::kRouterBias))->tensor,
            "model.layers.1.mlp.experts.e_score_correction_bias");
}

TensorTable renamed(const TensorTable& t, const std::string& from, const std::string& to) {
  TensorTable out;
  for (const auto& [n, i] : t) {
    std::string m = n;
    const size_t p = m.find(from);
    if (p != std::string::npos) m.replace(p, from.size(), to);
    out[m] = i;
  }
  return out;
}

TEST(LagunaAdapter, AcceptsNameVariants) {
  auto t = open_tiny();
  auto a = adapt(t.config, renamed(t.table, "mlp.shared_expert.", "mlp.shared_experts."));
  EXPECT_TRUE(a.ok()) << a.message();
  auto b = adapt(t.config,
                 renamed(t.table, "mlp.experts.e_score_correction_bias", "mlp.gate.e_score_correction_bias"));
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->weights.find(roles::layer(2, roles::kRouterBias))->tensor,
            "model.layers.2.mlp.gate.e_score_correction_bias");
  auto tab = t.table;
  tab["model.layers.0.self_attn.rotary_emb.inv_freq"] = t.table.begin()->second;  // ignored
  EXPECT_TRUE(adapt(t.config, tab).ok());
}

TEST(LagunaAdapter, RefusesUnknownAndMissingTensors) {
  auto t = open_tiny();
  auto tab = t.table;
  tab["model.layers.1.mlp.extra.weight"] = t.table.begin()->second;
  auto a = adapt(t.config, tab);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("model.layers.1.mlp.extra.weight"), std::string::npos) << a.message();
  tab = t.table;
  tab.erase("model.layers.2.mlp.experts.7.up_proj.weight");
  a = adapt(t.config, tab);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("model.layers.2.mlp.experts.7.up_proj.weight"), std::string::npos)
      << a.message();
}

TEST(LagunaAdapter, RefusesUnsupportedConfigValues) {
  auto t = open_tiny();
  struct Case {
    const char* key;
    nlohmann::json value;
  } cases[] = {{"swa_attention_sink_enabled", true},
               {"moe_router_logit_softcapping", 30.0},
               {"moe_router_score_func", "softmax"},
               {"moe_apply_router_weight_on_input", true}};
  for (const auto& c : cases) {
    auto cfg = t.config;
    cfg[c.key] = c.value;
    auto a = adapt(cfg, t.table);
    ASSERT_FALSE(a.ok()) << c.key;
    EXPECT_NE(a.message().find(c.key), std::string::npos) << a.message();
  }
  auto cfg = t.config;
  cfg["architectures"] = {"MysteryForCausalLM"};
  auto a = adapt(cfg, t.table);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("MysteryForCausalLM"), std::string::npos);
}

TEST(LagunaAdapter, GateModeFromShapeNotFromConfig) {
  auto t = open_tiny();
  auto cfg = t.config;
  cfg["gating"] = "per-element";  // ignored: g_proj is [n_h, H]
  auto a = adapt(cfg, t.table);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->spec.layers[1].gate, GateMode::kPerHead);
}

TEST(OtherAdapters, Qwen3MoeAndLlamaFixturesLoad) {
  auto q = load_model(repo("tests/fixtures/qwen3-moe-tiny"));
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->spec.moe.score, RouterScore::kSoftmax);
  EXPECT_TRUE(q->spec.moe.renormalize);
  EXPECT_EQ(q->spec.moe.n_experts, 6);
  EXPECT_EQ(q->spec.layers[0].mlp, MlpKind::kDense);  // mlp_only_layers [0]
  EXPECT_EQ(q->spec.layers[1].mlp, MlpKind::kMoe);
  EXPECT_EQ(q->spec.layers[1].gate, GateMode::kNone);
  EXPECT_TRUE(q->spec.layers[1].qk_norm);
  auto l = load_model(repo("tests/fixtures/llama-tiny"));
  ASSERT_TRUE(l.ok()) << l.message();
  EXPECT_FALSE(l->spec.layers[0].qk_norm);
  EXPECT_EQ(l->spec.layers[0].rope.type, "llama3");
  // llama3 scaling leaves high frequencies alone and divides low ones by the factor.
  auto plain = rope_default_inv_freq(10000.0, 32);
  const auto& inv = l->spec.layers[0].rope.inv_freq;
  EXPECT_FLOAT_EQ(inv[0], plain[0]);
  EXPECT_NEAR(inv.back(), plain.back() / 8.0f, 1e-9);
}

}  // namespace
}  // namespace gridq::model

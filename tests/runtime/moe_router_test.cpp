// laguna.md §1.4 steps 4-5: e_score_correction_bias chooses experts but never weighs them. The shipped
// model's bias is all zeros, so this uses a hand-built model with a strongly non-zero bias and checks the
// CPU forward against an independent float64 reference of the same one-layer model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/router.h"
#include "synthetic_model.h"

namespace gridq::runtime {
namespace {

using testing::SynthModelOptions;

std::vector<double> rmsnorm(const std::vector<double>& v, const std::vector<float>& w) {
  double ss = 0;
  for (double x : v) ss += x * x;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(v.size()) + 1e-6);
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = w[i] * v[i] * inv;
  return o;
}
std::vector<double> matvec(const std::vector<float>& W, int rows, int cols, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y[static_cast<size_t>(r)] += W[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)];
  return y;
}
std::vector<double> swiglu(const testing::TensorStore& s, const std::string& p, int I, int H, const std::vector<double>& a) {
  auto g = matvec(s.get(p + "gate_proj.weight"), I, H, a);
  auto u = matvec(s.get(p + "up_proj.weight"), I, H, a);
  for (int i = 0; i < I; ++i) g[static_cast<size_t>(i)] = g[static_cast<size_t>(i)] / (1.0 + std::exp(-g[static_cast<size_t>(i)])) * u[static_cast<size_t>(i)];
  return matvec(s.get(p + "down_proj.weight"), H, I, g);
}

// Logits of token `tok` at position 0 of the one-layer zero-attention model, in float64.
// bias_weighs = true computes the wrong variant (bias added into the weights) to show the test can fail.
std::vector<double> reference(const testing::TensorStore& s, const SynthModelOptions& o, int tok, bool bias_weighs,
                              std::vector<int>* chosen_out) {
  const int H = o.hidden, E = o.experts;
  auto emb = s.get("model.embed_tokens.weight");
  std::vector<double> x(emb.begin() + tok * H, emb.begin() + (tok + 1) * H);
  const std::string p = "model.layers.0.";
  auto a2 = rmsnorm(x, s.get(p + "post_attention_layernorm.weight"));
  auto z = matvec(s.get(p + "mlp.gate.weight"), E, H, a2);
  auto bias = s.get(p + "mlp.experts.e_score_correction_bias");
  std::vector<double> sc(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    sc[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-z[static_cast<size_t>(e)]));
    sel[static_cast<size_t>(e)] = sc[static_cast<size_t>(e)] + bias[static_cast<size_t>(e)];
  }
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sel[static_cast<size_t>(a)] > sel[static_cast<size_t>(b)]; });
  order.resize(static_cast<size_t>(o.top_k));
  if (chosen_out) *chosen_out = order;
  double total = 0;
  for (int e : order) total += bias_weighs ? sel[static_cast<size_t>(e)] : sc[static_cast<size_t>(e)];
  std::vector<double> routed(static_cast<size_t>(H), 0.0);
  for (int e : order) {
    const double w = (bias_weighs ? sel[static_cast<size_t>(e)] : sc[static_cast<size_t>(e)]) / total;
    auto y = swiglu(s, p + "mlp.experts." + std::to_string(e) + ".", o.expert_inter, H, a2);
    for (int c = 0; c < H; ++c) routed[static_cast<size_t>(c)] += w * y[static_cast<size_t>(c)];
  }
  auto shared = swiglu(s, p + "mlp.shared_expert.", o.shared_inter, H, a2);
  for (int c = 0; c < H; ++c)
    x[static_cast<size_t>(c)] += o.routed_scaling * routed[static_cast<size_t>(c)] + shared[static_cast<size_t>(c)];
  auto h = rmsnorm(x, s.get("model.norm.weight"));
  return matvec(s.get("lm_head.weight"), o.vocab, H, h);
}

TEST(MoeRouter, BiasSelectsButNeverWeighs) {
  SynthModelOptions o;
  o.zero_attention = true;
  o.router_bias = {-10.0f, 0.0f, 0.0f, 10.0f};  // expert 3 always chosen, expert 0 never
  auto m = testing::make_synthetic(o);
  ASSERT_TRUE(m.engine);
  int differs_from_wrong = 0;
  for (int tok = 0; tok < o.vocab; ++tok) {
    auto s = m.engine->create_sequence();
    int32_t ids[1] = {tok};
    auto lg = m.engine->prefill(s, ids, LogitsMode::kLast);
    m.engine->free_sequence(s);
    ASSERT_TRUE(lg.ok()) << lg.message();
    std::vector<int> chosen;
    auto ref = reference(*m.store, o, tok, false, &chosen);
    auto wrong = reference(*m.store, o, tok, true, nullptr);
    ASSERT_TRUE(std::find(chosen.begin(), chosen.end(), 3) != chosen.end());
    ASSERT_TRUE(std::find(chosen.begin(), chosen.end(), 0) == chosen.end());
    double max_ref = 0, max_wrong = 0;
    for (int v = 0; v < o.vocab; ++v) {
      max_ref = std::max(max_ref, std::abs(ref[static_cast<size_t>(v)] - (*lg)[static_cast<size_t>(v)]));
      max_wrong = std::max(max_wrong, std::abs(wrong[static_cast<size_t>(v)] - (*lg)[static_cast<size_t>(v)]));
    }
    EXPECT_LT(max_ref, 1e-4) << "token " << tok;
    if (max_wrong > 1e-2) ++differs_from_wrong;
  }
  // The bias-as-weight variant must be distinguishable, or this test could not catch it.
  EXPECT_GT(differs_from_wrong, o.vocab / 2);
}

TEST(MoeRouter, RouteTokenSigmoidAndSoftmax) {
  const float z[5] = {0.3f, -1.0f, 2.0f, 0.29f, -0.5f};
  const float bias[5] = {0.0f, 5.0f, 0.0f, 0.0f, 0.0f};
  int idx[2];
  float w[2];
  route_token(z, 5, bias, 2, model::RouterScore::kSigmoid, true, idx, w);
  EXPECT_EQ(idx[0], 1);  // biased to the top
  EXPECT_EQ(idx[1], 2);
  const double s1 = 1 / (1 + std::exp(1.0)), s2 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(w[0], s1 / (s1 + s2), 1e-6);
  EXPECT_NEAR(w[1], s2 / (s1 + s2), 1e-6);
  route_token(z, 5, nullptr, 2, model::RouterScore::kSoftmax, false, idx, w);
  double zs = 0;
  for (float v : z) zs += std::exp(static_cast<double>(v));
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 0);
  EXPECT_NEAR(w[0], std::exp(2.0) / zs, 1e-6);
  EXPECT_NEAR(w[1], std::exp(0.3) / zs, 1e-6);
}

}  // namespace
}  // namespace gridq::runtime

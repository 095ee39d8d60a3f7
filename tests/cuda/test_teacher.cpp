// The quantizer's teacher forward on the GPU (runtime/cuda/teacher/teacher.h) against the CPU teacher
// (quant::LayerStreamer without device_forward) on laguna-tiny-code: every layer's S4 checks pass on the
// device captures, the carry and every H stay within the device engine's BF16 tolerance of the CPU's, the
// routing counts nearly agree (near-ties may flip), and a sequence's numbers do not depend on which other
// sequences share its step. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "model/loader.h"
#include "quant/capture.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/register.h"
#include "runtime/device.h"
#include "text/tokenizer.h"

namespace gridq::cuda::test {
namespace {

using testing::repo_path;

std::string model_dir() { return repo_path("models/laguna-tiny-code"); }

quant::CalibSet calib(int n_seq, int seq_len) {
  auto tok = text::Tokenizer::from_file(model_dir() + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.message();
  quant::CalibOptions o;
  o.tokens = int64_t{n_seq} * seq_len;
  o.seq_len = seq_len;
  o.holdout_every = 4;
  auto cs = quant::make_calib_set(repo_path("data/code-calib.txt"), *tok, model_dir() + "/tokenizer.json", o);
  EXPECT_TRUE(cs.ok()) << cs.message();
  return cs.ok() ? *cs : quant::CalibSet{};
}

// ‖a − b‖ / ‖b‖ (float64 sums).
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(CudaTeacher, MatchesTheCpuTeacherOnTheTinyModel) {
  REQUIRE_GPU();
  register_backend();
  const quant::CalibSet cs = calib(16, 256);  // four steps of four sequences on the device
  ASSERT_EQ(cs.n_seq, 16);
  quant::StreamerOptions go;
  go.device_forward = true;
  go.device_hessians = true;
  go.chunk_tokens = 8 * 256;  // two device calls per layer
  auto cpu = quant::LayerStreamer::create(model_dir(), cs, {});
  auto gpu = quant::LayerStreamer::create(model_dir(), cs, go);
  ASSERT_OK(cpu);
  ASSERT_OK(gpu);
  for (int l = 0; l < (*cpu)->num_layers(); ++l) {
    auto c = (*cpu)->run_layer();
    auto g = (*gpu)->run_layer();
    ASSERT_OK(c);
    ASSERT_TRUE(g.ok()) << "layer " << l << ": " << g.message();  // every S4 check passed on the device
    EXPECT_LT(rel_l2((*gpu)->carry(), (*cpu)->carry()), 2e-2) << "carry after layer " << l;
    for (auto [gi, ci] : {std::pair{&g->attn_in, &c->attn_in},
                          {&g->o_in, &c->o_in},
                          {&g->mlp_in, &c->mlp_in},
                          {&g->dense_down_in, &c->dense_down_in},
                          {&g->shared_down_in, &c->shared_down_in}}) {
      EXPECT_EQ(gi->n, ci->n) << ci->name;
      EXPECT_EQ(gi->n_hold, ci->n_hold) << ci->name;
      if (ci->cols > 0) {
        EXPECT_LT(rel_l2(gi->H, ci->H), 3e-2) << ci->name;
      }
    }
    int64_t sum_g = 0, sum_c = 0, diff = 0;
    double num = 0, den = 0;
    for (size_t e = 0; e < c->expert_counts.size(); ++e) {
      sum_g += g->expert_counts[e], sum_c += c->expert_counts[e];
      diff += std::abs(g->expert_counts[e] - c->expert_counts[e]);
      const double r = rel_l2(g->expert_in[e].H, c->expert_in[e].H);
      num += r * r, den += 1.0;
    }
    EXPECT_EQ(sum_g, sum_c) << "layer " << l;
    EXPECT_LE(static_cast<double>(diff), 0.02 * static_cast<double>(std::max<int64_t>(sum_c, 1)))
        << "layer " << l << ": routing counts differ by " << diff << " of " << sum_c;
    if (den > 0) {
      EXPECT_LT(std::sqrt(num / den), 5e-2) << "layer " << l << " expert H (rms of relative errors)";
    }
  }
  EXPECT_GT((*gpu)->peak_device_bytes(), 0);
}

TEST(CudaTeacher, SameBitsWhateverSharesTheStep) {
  REQUIRE_GPU();
  register_backend();
  auto lm = model::load_model(model_dir());
  ASSERT_OK(lm);
  auto w = runtime::build_model_weights(lm->spec, lm->weights);
  ASSERT_OK(w);
  auto t = runtime::cuda_backend_hooks()->teacher(lm->spec);
  ASSERT_OK(t);
  const int S = 200, H = lm->spec.hidden_size;  // sequences that do not fill a step evenly
  Rng rng(test_seed());
  std::vector<float> x(static_cast<size_t>(7) * S * H);
  for (auto& v : x) v = rng.uniform(-1.0f, 1.0f);
  for (int l = 0; l < 2; ++l) {  // the dense layer and a MoE layer
    std::vector<float> all = x, tail(x.begin() + static_cast<long>(3) * S * H, x.end());
    ASSERT_OK((*t)->layer(l, w->layers[static_cast<size_t>(l)], 7, S, all.data(), nullptr));
    ASSERT_OK((*t)->layer(l, w->layers[static_cast<size_t>(l)], 4, S, tail.data(), nullptr));
    EXPECT_EQ(std::memcmp(all.data() + static_cast<size_t>(3) * S * H, tail.data(), tail.size() * 4), 0)
        << "layer " << l << ": sequences 3..6 changed with their step's company";
    EXPECT_NE(std::memcmp(all.data(), x.data(), tail.size() * 4), 0) << "layer " << l << " did nothing";
  }
  // Fails closed on a sequence longer than a step (kMaxStepRows: 8192 rows since session 33).
  const int too_long = detail::kMaxStepRows + 1;
  std::vector<float> long_x(static_cast<size_t>(too_long) * H);
  EXPECT_FALSE((*t)->layer(0, w->layers[0], 1, too_long, long_x.data(), nullptr).ok());
}

}  // namespace
}  // namespace gridq::cuda::test

// `gridq bench decode` (runtime/cuda/bench_decode.h) and the synthetic full-size models it runs
// (runtime/cuda/synthetic_model.h). The SyntheticSpec tests need no GPU (they check the specs against
// laguna.md §2/§3 and against the real adapter on the bundled model); the others skip without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "cuda_test_util.h"
#include "model/loader.h"
#include "runtime/cuda/bench_decode.h"
#include "runtime/cuda/bench_decode_util.h"
#include "runtime/cuda/relayout.h"
#include "runtime/cuda/synthetic_model.h"

namespace gridq::cuda::test {
namespace {

using model::AttnKind;
using model::MlpKind;
using model::ModelSpec;

// Parameters of a Laguna spec (laguna.md §3): attention q/k/v/o and g_proj, norms, dense MLP, routers and
// their biases, routed and shared experts, embed_tokens, lm_head, final norm. `active`: top-k routed experts
// per layer and one embedding row instead of the table.
int64_t param_count(const ModelSpec& s, bool active = false) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  int64_t n = (active ? H : V * H) + V * H + H;
  for (const auto& L : s.layers) {
    const int64_t d = L.head_dim, qw = L.n_heads * d, kvw = L.n_kv_heads * d;
    n += H * (qw + 2 * kvw) + qw * H + L.n_heads * H + 2 * H + 2 * d;
    if (L.mlp == MlpKind::kDense) {
      n += 3 * H * L.dense_intermediate;
      continue;
    }
    const auto& M = s.moe;
    const int64_t experts = active ? M.top_k : M.n_experts;
    n += M.n_experts * H + M.n_experts + experts * 3 * H * M.expert_intermediate +
         3 * H * M.shared_intermediate;
  }
  return n;
}

TEST(SyntheticSpec, LagunaS21MatchesTheDoc) {
  auto s = synthetic_spec("laguna-s-2.1");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->architecture, "LagunaForCausalLM");
  EXPECT_EQ(s->n_layers, 48);
  ASSERT_EQ(s->layers.size(), 48u);
  EXPECT_EQ(s->hidden_size, 3072);
  EXPECT_EQ(s->vocab_size, 100352);
  EXPECT_EQ(s->max_position_embeddings, 1048576);
  for (int l = 0; l < 48; ++l) {
    const auto& L = s->layers[static_cast<size_t>(l)];
    const bool full = l % 4 == 0;
    EXPECT_EQ(L.attn, full ? AttnKind::kFull : AttnKind::kSliding) << l;
    EXPECT_EQ(L.n_heads, full ? 48 : 72) << l;
    EXPECT_EQ(L.n_kv_heads, 8) << l;
    EXPECT_EQ(L.head_dim, 128) << l;
    EXPECT_EQ(L.window, full ? 0 : 512) << l;
    EXPECT_EQ(L.rope.rotary_dim, full ? 64 : 128) << l;
    EXPECT_EQ(L.rope.inv_freq.size(), full ? 32u : 64u) << l;
    EXPECT_FLOAT_EQ(L.rope.attention_factor, full ? 1.4852030263919618f : 1.0f) << l;
    EXPECT_EQ(L.gate, model::GateMode::kPerHead) << l;
    EXPECT_TRUE(L.qk_norm) << l;
    EXPECT_EQ(L.mlp, l == 0 ? MlpKind::kDense : MlpKind::kMoe) << l;
    EXPECT_EQ(L.dense_intermediate, l == 0 ? 12288 : 0) << l;
  }
  // YaRN keeps the high-frequency pairs (i < low = 9) and divides the low-frequency ones (i > high = 18) by
  // f.
  const auto& f = s->layers[0].rope.inv_freq;
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[31] * 128.0 / std::pow(500000.0, -62.0 / 64.0), 1.0, 1e-5);
  EXPECT_EQ(s->moe.n_experts, 256);
  EXPECT_EQ(s->moe.top_k, 10);
  EXPECT_EQ(s->moe.expert_intermediate, 1024);
  EXPECT_EQ(s->moe.shared_intermediate, 1024);
  EXPECT_FLOAT_EQ(s->moe.routed_scaling, 2.5f);
  EXPECT_EQ(s->moe.score, model::RouterScore::kSigmoid);
  EXPECT_TRUE(s->moe.renormalize);
  EXPECT_TRUE(s->moe.has_bias);
  EXPECT_EQ(param_count(*s), 117'561'977'600);
  EXPECT_EQ(param_count(*s, true), 8'140'977'920);
  // §3 artifact bytes (37,613,155,328) less norms and bias (668,672), plus the FP8 row scales (4 B per row of
  // q/k/v/o: 12 full layers × 11264 rows + 36 sliding × 14336), as upload_model counts packed bytes.
  EXPECT_EQ(synthetic_packed_bytes(*s), size_t{37'613'155'328} - 668'672 + 4 * (12 * 11264 + 36 * 14336));
}

TEST(SyntheticSpec, LagunaXs21AndUnknownNames) {
  auto s = synthetic_spec("laguna-xs-2.1");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->n_layers, 40);
  EXPECT_EQ(s->layers[1].n_heads, 64);
  EXPECT_EQ(s->layers[4].n_heads, 48);
  EXPECT_EQ(s->moe.top_k, 8);
  EXPECT_NEAR(static_cast<double>(param_count(*s)), 33.44e9, 0.005e9);  // laguna.md §3
  EXPECT_NEAR(static_cast<double>(param_count(*s, true)), 2.81e9, 0.005e9);
  auto bad = synthetic_spec("laguna-m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("laguna-s-2.1"), std::string::npos) << bad.message();
}

// The tiny synthetic spec is what the real adapter makes of the bundled model's config and tensors.
TEST(SyntheticSpec, TinyMatchesTheAdapterOnTheBundledModel) {
  auto s = synthetic_spec("laguna-tiny-code");
  ASSERT_TRUE(s.ok()) << s.message();
  auto lm = model::load_model(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code");
  ASSERT_TRUE(lm.ok()) << lm.message();
  const ModelSpec& r = lm->spec;
  EXPECT_EQ(s->architecture, r.architecture);
  EXPECT_EQ(s->vocab_size, r.vocab_size);
  EXPECT_EQ(s->hidden_size, r.hidden_size);
  EXPECT_EQ(s->n_layers, r.n_layers);
  EXPECT_EQ(s->norm_eps, r.norm_eps);
  EXPECT_EQ(s->max_position_embeddings, r.max_position_embeddings);
  EXPECT_EQ(s->tie_word_embeddings, r.tie_word_embeddings);
  EXPECT_EQ(s->bos_token_id, r.bos_token_id);
  EXPECT_EQ(s->eos_token_ids, r.eos_token_ids);
  EXPECT_EQ(s->pad_token_id, r.pad_token_id);
  ASSERT_EQ(s->layers.size(), r.layers.size());
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const auto &a = s->layers[l], &b = r.layers[l];
    EXPECT_EQ(a.attn, b.attn) << l;
    EXPECT_EQ(a.n_heads, b.n_heads) << l;
    EXPECT_EQ(a.n_kv_heads, b.n_kv_heads) << l;
    EXPECT_EQ(a.head_dim, b.head_dim) << l;
    EXPECT_EQ(a.window, b.window) << l;
    EXPECT_EQ(a.rope.type, b.rope.type) << l;
    EXPECT_EQ(a.rope.theta, b.rope.theta) << l;
    EXPECT_EQ(a.rope.rotary_dim, b.rope.rotary_dim) << l;
    EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor) << l;
    EXPECT_EQ(a.rope.inv_freq, b.rope.inv_freq) << l;  // bit-exact fp32
    EXPECT_EQ(a.gate, b.gate) << l;
    EXPECT_EQ(a.qk_norm, b.qk_norm) << l;
    EXPECT_EQ(a.mlp, b.mlp) << l;
    EXPECT_EQ(a.dense_intermediate, b.dense_intermediate) << l;
  }
  EXPECT_EQ(s->moe.n_experts, r.moe.n_experts);
  EXPECT_EQ(s->moe.top_k, r.moe.top_k);
  EXPECT_EQ(s->moe.expert_intermediate, r.moe.expert_intermediate);
  EXPECT_EQ(s->moe.shared_intermediate, r.moe.shared_intermediate);
  EXPECT_EQ(s->moe.routed_scaling, r.moe.routed_scaling);
  EXPECT_EQ(s->moe.score, r.moe.score);
  EXPECT_EQ(s->moe.renormalize, r.moe.renormalize);
  EXPECT_EQ(s->moe.has_bias, r.moe.has_bias);
  EXPECT_EQ(s->moe.shared_gated, r.moe.shared_gated);
}

TEST(SyntheticModel, TinyDeviceModelHasUploadModelsLayout) {
  REQUIRE_GPU();
  auto s = synthetic_spec("laguna-tiny-code");
  ASSERT_TRUE(s.ok()) << s.message();
  auto dm = synthetic_device_model(*s, 7);
  ASSERT_TRUE(dm.ok()) << dm.message();
  const DeviceModel& m = **dm;
  EXPECT_EQ(m.packed_bytes, synthetic_packed_bytes(*s));
  EXPECT_GT(m.weight_bytes, m.packed_bytes);
  ASSERT_EQ(m.layers.size(), 4u);
  EXPECT_EQ(m.lm_head.out_rows(), 4096);
  for (size_t l = 0; l < 4; ++l) {
    const DevLayer& dl = m.layers[l];
    const int nh = s->layers[l].n_heads;
    EXPECT_TRUE(dl.stacked);
    EXPECT_EQ(dl.qkv.rows, nh * 128 + 2 * 2 * 128);
    EXPECT_EQ(dl.qkv.tiled.m.format, WeightFormat::FP8);
    EXPECT_EQ(dl.qkv.act_bits, 8);
    EXPECT_EQ(dl.g.rows, nh);
    EXPECT_EQ(dl.g.out_rows(), 16);  // padded to one tile
    EXPECT_EQ(dl.o.cols, nh * 128);
    if (l == 0) {
      EXPECT_TRUE(dl.mlp.fused);
      EXPECT_EQ(dl.mlp.gate_up.rows, 2048);
      continue;
    }
    EXPECT_EQ(dl.router.out_rows(), 12);  // the reference matvec: no padding rows
    EXPECT_EQ(dl.router.path, DevLinear::Path::kRef);
    EXPECT_NE(dl.router_bias, nullptr);
    EXPECT_TRUE(dl.shared.fused);
    EXPECT_TRUE(dl.experts.fused);
    EXPECT_EQ(dl.experts.gate_up.m.rows, 512);
    EXPECT_EQ(dl.experts.down.m.in, 256);
    EXPECT_EQ(dl.experts.gate_up.m.expert_stride, 512 / 16 * 2 * cb_unit_bytes(16, 2));
  }
}

// Issue 10's batch-scaling ratio (no GPU): a cell's step against the batch-1 step at its context scaled by
// the bytes it reads; cells without a batch-1 partner get none.
TEST(BenchDecode, Batch1RatioScalesByBytes) {
  nlohmann::json cells = nlohmann::json::array();
  auto cell = [](int batch, int ctx, double ms, double bytes) {
    return nlohmann::json{{"batch", batch}, {"context", ctx}, {"ms_per_step", ms}, {"bytes_per_step", bytes}};
  };
  cells.push_back(cell(1, 0, 2.0, 6e9));
  cells.push_back(cell(8, 0, 3.0, 9e9));     // 1.5x the bytes in 1.5x the time: 1.0
  cells.push_back(cell(8, 1024, 3.0, 9e9));  // no batch-1 cell at 1024
  cells.push_back(cell(16, 0, 6.0, 12e9));   // 2x the bytes in 3x the time: 1.5
  decode_bench::add_batch1_ratios(cells);
  EXPECT_DOUBLE_EQ(cells[0]["vs_batch1_bytes_scaled"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(cells[1]["vs_batch1_bytes_scaled"].get<double>(), 1.0);
  EXPECT_FALSE(cells[2].contains("vs_batch1_bytes_scaled"));
  EXPECT_DOUBLE_EQ(cells[3]["vs_batch1_bytes_scaled"].get<double>(), 1.5);
}

TEST(BenchDecode, TinySyntheticCells) {
  REQUIRE_GPU();
  BenchDecodeOptions o;
  o.synthetic = "laguna-tiny-code";
  o.batches = {1, 2};
  o.contexts = {0, 100};
  o.steps = 2;
  o.progress = false;
  auto r = run_bench_decode(o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::printf("%s", format_bench_decode_table(*r).c_str());
  ASSERT_TRUE(r->contains("cells"));
  const auto& cells = (*r)["cells"];
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_TRUE((*r)["skipped"].empty());
  EXPECT_GT((*r)["copy_gbs"].get<double>(), 0.0);
  EXPECT_GT((*r)["model"]["weights_bytes"].get<double>(), 0.0);
  for (const auto& c : cells) {
    EXPECT_GT(c["tok_s"].get<double>(), 0.0) << c.dump();
    EXPECT_GT(c["tok_s_sampled"].get<double>(), 0.0) << c.dump();
    // The sampled pass ran the same tokens: its greedy tokens are the logits pass's argmaxes.
    EXPECT_TRUE(c["sampled_is_logits_argmax"].get<bool>()) << c.dump();
    EXPECT_GT(c["gbs"].get<double>(), 0.0) << c.dump();
    EXPECT_GT(c["bytes_per_step"].get<double>(), c["kv_bytes_per_step"].get<double>()) << c.dump();
    EXPECT_TRUE(c["logits_finite"].get<bool>()) << c.dump();
    // The phases split the step's bytes (all but the norm vectors and codebooks), and a decode step replays
    // a graph of the forward's kernels.
    double split = 0;
    for (const auto& ph : c["phases"]) split += ph["bytes"].get<double>();
    EXPECT_LE(split, c["bytes_per_step"].get<double>()) << c.dump();
    EXPECT_GT(split, 0.9 * c["bytes_per_step"].get<double>()) << c.dump();
    EXPECT_GT(c["phases"]["moe routed"]["bytes"].get<double>(), 0.0) << c.dump();
    EXPECT_GT(c["kernels_per_step"].get<int>(), 2 * 4) << c.dump();  // ≥ 2 kernels a layer, 4 layers
  }
  EXPECT_EQ(cells[0]["batch"], 1);
  EXPECT_EQ(cells[0]["context"], 0);
  EXPECT_EQ(cells[3]["batch"], 2);
  EXPECT_EQ(cells[3]["context"], 100);
  EXPECT_GT(cells[3]["vs_batch1_bytes_scaled"].get<double>(), 0.0);
  // More context, more KV read.
  EXPECT_GT(cells[1]["kv_bytes_per_step"].get<double>(), cells[0]["kv_bytes_per_step"].get<double>());
}

// --temperature / --top-p / --top-k: the sampled pass draws every row's plan each step (runtime::Sampler);
// its tokens are not argmaxes, so the argmax check is null, and the parameters are recorded.
TEST(BenchDecode, SampledPassWithTemperature) {
  REQUIRE_GPU();
  BenchDecodeOptions o;
  o.synthetic = "laguna-tiny-code";
  o.batches = {3};
  o.contexts = {0};
  o.steps = 3;
  o.progress = false;
  o.temperature = 0.8f, o.top_p = 0.9f, o.top_k = 50;
  auto r = run_bench_decode(o);
  ASSERT_TRUE(r.ok()) << r.message();
  const auto& c = (*r)["cells"][0];
  EXPECT_GT(c["tok_s_sampled"].get<double>(), 0.0) << c.dump();
  EXPECT_TRUE(c["sampled_is_logits_argmax"].is_null()) << c.dump();
  EXPECT_FLOAT_EQ((*r)["options"]["sampling"]["temperature"].get<float>(), 0.8f);
  EXPECT_EQ((*r)["options"]["sampling"]["top_k"].get<int>(), 50);
}

TEST(BenchDecode, BundledCheckpointDirectory) {
  REQUIRE_GPU();
  BenchDecodeOptions o;
  o.model_dir = std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code";
  o.batches = {1};
  o.contexts = {0, 8192};  // 8192 passes the model's 4096 positions: skipped
  o.steps = 2;
  o.warmup = 1;
  o.progress = false;
  auto r = run_bench_decode(o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ((*r)["cells"].size(), 1u);
  ASSERT_EQ((*r)["skipped"].size(), 1u);
  EXPECT_GT((*r)["cells"][0]["tok_s"].get<double>(), 0.0);
  EXPECT_TRUE((*r)["cells"][0]["logits_finite"].get<bool>());
}

// Entry to `bench decode` from the test binary (the lean device build, bench/device, builds only test_cuda):
// runs when GRIDQ_BENCH_DECODE_OUT names a JSON output file, skipped otherwise. GRIDQ_BENCH_DECODE_MODEL is a
// synthetic name (default laguna-s-2.1) or a model directory; GRIDQ_BENCH_DECODE_STEPS the timed steps.
TEST(BenchDecode, WhenRequested) {
  const char* out = std::getenv("GRIDQ_BENCH_DECODE_OUT");
  if (out == nullptr) GTEST_SKIP() << "set GRIDQ_BENCH_DECODE_OUT=<file.json> to run the decode benchmark";
  REQUIRE_GPU();
  BenchDecodeOptions o;
  const char* m = std::getenv("GRIDQ_BENCH_DECODE_MODEL");
  const std::string model = m ? m : "laguna-s-2.1";
  if (model.find('/') != std::string::npos)
    o.model_dir = model;
  else
    o.synthetic = model;
  if (const char* n = std::getenv("GRIDQ_BENCH_DECODE_STEPS")) o.steps = std::max(1, std::atoi(n));
  auto r = run_bench_decode(o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::ofstream(out) << r->dump(2) << "\n";
  std::printf("%s", format_bench_decode_table(*r).c_str());
}

TEST(BenchDecode, RefusesBadOptions) {
  BenchDecodeOptions o;  // neither --synthetic nor a directory
  EXPECT_FALSE(run_bench_decode(o).ok());
  o.synthetic = "laguna-tiny-code";
  o.model_dir = "/nonexistent";
  EXPECT_FALSE(run_bench_decode(o).ok());
  o.model_dir.clear();
  o.batches = {0};
  EXPECT_FALSE(run_bench_decode(o).ok());
  o.batches = {1};
  for (int mask : {-2, 32}) {  // -1 is auto, 0-31 the masks
    o.l2_ahead = mask;
    auto r = run_bench_decode(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("--l2-ahead"), std::string::npos) << r.message();
  }
}

}  // namespace
}  // namespace gridq::cuda::test

// The rounding floor of the CPU reference: how far apart are the logits of two correct implementations that
// differ only by BF16-level rounding of the activations? Runs the CPU forward (mirroring CpuBackend::forward:
// one sequence, the whole prompt in one call, logits of every row) twice on the same tokens: (a) unchanged,
// (b) with the residual stream rounded to BF16 after every decoder layer and a BF16 KV cache, the size of
// perturbation a BF16-activation engine with a BF16 KV cache introduces. Mean KL(a‖b) and top-1 agreement are
// printed per model: the bundled BF16 model (asserted small), and the artifacts named by
// GRIDQ_FLOOR_ARTIFACTS (colon-separated; measured only). Discontinuous activation contracts (FP4 group-16
// QDQ of the experts' input, act_bits 4) flip codes on last-bit differences, so their floor is expected to be
// far higher than the BF16 model's.
#include "rounding_floor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "model/loader.h"
#include "parity_util.h"
#include "runtime/artifact_weights.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/matmul.h"
#include "runtime/engine.h"
#include "runtime/model_weights.h"
#include "text/tokenizer.h"

namespace gridq::runtime {
namespace {

using testing::repo_path;

// The 640 rows of the GPU parity test: the fixture's two windows plus 320 tokens of held-out code (past the
// bundled model's 64-token sliding window). The sanitizer build keeps the fixture windows only.
std::vector<std::vector<int32_t>> floor_seqs() {
  auto out = testing::fixture_seqs(repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors"));
  if (testing::kSanitized) return out;
  auto tok = text::Tokenizer::from_file(repo_path("models/laguna-tiny-code/tokenizer.json"));
  EXPECT_TRUE(tok.ok()) << tok.message();
  if (!tok.ok()) return out;
  const size_t n = 320;
  std::ifstream in(repo_path("data/code-eval.txt"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto ids = tok->encode(ss.str().substr(0, 64 * n));
  EXPECT_GE(ids.size(), n);
  if (ids.size() > n) ids.resize(n);
  out.push_back(std::move(ids));
  return out;
}

void expect_sane(const Floor& f, const std::string& name) {
  EXPECT_GT(f.c.rows, 0) << name;
  EXPECT_TRUE(std::isfinite(f.c.mean_kl)) << name;
  EXPECT_GT(f.c.mean_kl, 0.0) << name << ": rounding x to BF16 changed nothing";
}

TEST(RoundingFloor, BundledBf16) {
  const auto seqs = floor_seqs();
  ASSERT_FALSE(seqs.empty());
  auto lm = model::load_model(repo_path("models/laguna-tiny-code"));
  ASSERT_TRUE(lm.ok()) << lm.message();
  auto w = build_model_weights(lm->spec, lm->weights);
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_TRUE(cpu::validate_weights(lm->spec, *w).ok());
  const Floor f = measure("laguna-tiny-code BF16", lm->spec, *w, seqs);
  expect_sane(f, "laguna-tiny-code BF16");
  EXPECT_LT(f.c.mean_kl, 1e-3);
}

// Measurement only: no upper bound (the floor of a discontinuous activation contract is what we want to
// know).
TEST(RoundingFloor, Artifacts) {
  const char* env = std::getenv("GRIDQ_FLOOR_ARTIFACTS");
  if (!env || !*env) GTEST_SKIP() << "GRIDQ_FLOOR_ARTIFACTS not set";
  const auto seqs = floor_seqs();
  ASSERT_FALSE(seqs.empty());
  std::stringstream ss(env);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string name = std::filesystem::path(dir).filename().string();
    auto am = load_artifact_model(dir);
    ASSERT_TRUE(am.ok()) << dir << ": " << am.message();
    ASSERT_TRUE(cpu::validate_weights((*am)->spec, (*am)->weights).ok()) << dir;
    const Floor f = measure(name, (*am)->spec, (*am)->weights, seqs);
    expect_sane(f, name);
  }
}

// A second BF16-activation engine on the GPU parity test's llama-tiny rows (tests/cuda/test_engine.cpp: the
// fixture's windows plus 320 random tokens): the CPU's own fast path (--cpu-kernels bf16: every matrix input
// and the attention probabilities in BF16, as the GPU and vLLM have them) against the CPU reference. How many
// argmaxes such an engine flips on this random-weight model's near-flat logits is the context of the GPU's
// llama-tiny top-1 (issue 9); measured, with only a KL bound that a wrong kernel would not meet.
TEST(RoundingFloor, LlamaTinyBf16KernelsAgainstReference) {
  if (!cpu::have_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const auto seqs = testing::tiny_seqs("tests/fixtures/llama-tiny.hf-logits.safetensors");
  int64_t rows = 0;
  for (const auto& q : seqs) rows += static_cast<int64_t>(q.size());
  std::vector<float> logits[2];
  for (int k = 0; k < 2; ++k) {
    EngineOptions o;
    o.device = "cpu";
    o.cpu_kernels = k ? "bf16" : "reference";
    auto eng = Engine::open(repo_path("tests/fixtures/llama-tiny"), o);
    ASSERT_TRUE(eng.ok()) << eng.message();
    for (const auto& s : seqs) {
      const SeqId id = (*eng)->create_sequence();
      auto lg = (*eng)->prefill(id, s, LogitsMode::kAll);
      ASSERT_TRUE(lg.ok()) << lg.message();
      logits[k].insert(logits[k].end(), lg->begin(), lg->end());
      (*eng)->free_sequence(id);
    }
  }
  const int64_t V = static_cast<int64_t>(logits[0].size()) / rows;
  const auto c = testing::compare_logits(logits[0].data(), logits[1].data(), rows, V);
  std::printf(
      "[bf16 engine floor] llama-tiny rows %lld: mean KL %.3e top-1 %.4f (%lld flips, widest margin %.3g)\n",
      static_cast<long long>(c.rows), c.mean_kl,
      static_cast<double>(c.rows - c.argmax_mismatch) / static_cast<double>(c.rows),
      static_cast<long long>(c.argmax_mismatch), c.max_mismatch_margin);
  EXPECT_GT(c.mean_kl, 0.0) << "the bf16 kernels changed nothing";
  EXPECT_LT(c.mean_kl, 1e-3);
}

}  // namespace
}  // namespace gridq::runtime

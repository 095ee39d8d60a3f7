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
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/matmul.h"
#include "runtime/model_weights.h"
#include "text/tokenizer.h"

namespace gridq::runtime {
namespace {

using testing::repo_path;

// The 640 rows of the GPU parity test: the fixture's two windows plus 320 tokens of held-out code (past the
// bundled model's 64-token sliding window). The sanitizer build keeps the fixture windows only.
std::vector<std::vector<int32_t>> floor_seqs() {
  std::vector<std::vector<int32_t>> out;
  auto f = testing::load_fixture(repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors"));
  for (int64_t b = 0; b < f.B; ++b) out.emplace_back(f.ids.begin() + b * f.T, f.ids.begin() + (b + 1) * f.T);
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

}  // namespace
}  // namespace gridq::runtime

// `gridq bench checkpoint` (runtime/cuda/bench_checkpoint.h): the written directory loads as the Laguna model
// synthetic_spec describes (shapes, layer kinds, heads, RoPE), its bytes depend on the seed only, and an
// existing directory is never overwritten. CPU only: no GPU needed.
#include <gtest/gtest.h>

#include <filesystem>

#include "../runtime/parity_util.h"
#include "model/loader.h"
#include "runtime/cuda/bench_checkpoint.h"
#include "runtime/cuda/synthetic_model.h"
#include "runtime/model_weights.h"

namespace gridq::cuda::test {
namespace {

namespace fs = std::filesystem;

TEST(BenchCheckpoint, LoadsAsTheSyntheticSpecAndIsDeterministic) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("gridq-ckpt-{}", getpid());
  fs::remove_all(dir);
  CheckpointOptions o;
  o.shape = "laguna-tiny-code";
  o.layers = 3;
  o.tokenizer_from = testing::repo_path("models/laguna-tiny-code");
  o.out = (dir / "a").string();
  auto r = write_synthetic_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->shards, 4);
  auto lm = model::load_model(o.out);
  ASSERT_TRUE(lm.ok()) << lm.message();
  auto want = synthetic_spec("laguna-tiny-code");
  ASSERT_TRUE(want.ok());
  const auto& s = lm->spec;
  EXPECT_EQ(s.n_layers, 3);
  EXPECT_EQ(s.hidden_size, want->hidden_size);
  EXPECT_EQ(s.vocab_size, want->vocab_size);
  EXPECT_EQ(s.moe.n_experts, want->moe.n_experts);
  EXPECT_EQ(s.moe.top_k, want->moe.top_k);
  for (int l = 0; l < 3; ++l) {
    const auto& a = s.layers[static_cast<size_t>(l)];
    const auto& b = want->layers[static_cast<size_t>(l)];
    EXPECT_EQ(a.attn, b.attn) << l;
    EXPECT_EQ(a.mlp, b.mlp) << l;
    EXPECT_EQ(a.n_heads, b.n_heads) << l;
    EXPECT_EQ(a.window, b.window) << l;
    EXPECT_EQ(a.rope.inv_freq, b.rope.inv_freq) << l;
  }
  auto w = runtime::build_model_weights(lm->spec, lm->weights);
  ASSERT_TRUE(w.ok()) << w.message();
  // The same seed, the same bytes; an existing directory is refused.
  o.out = (dir / "b").string();
  ASSERT_TRUE(write_synthetic_checkpoint(o).ok());
  for (const auto& e : fs::directory_iterator(dir / "a")) {
    if (e.path().extension() != ".safetensors") continue;
    EXPECT_EQ(fs::file_size(e.path()), fs::file_size(dir / "b" / e.path().filename()));
    EXPECT_EQ(
        std::system(fmt::format("cmp -s {} {}", e.path().string(), (dir / "b" / e.path().filename()).string())
                        .c_str()),
        0)
        << e.path();
  }
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gridq::cuda::test

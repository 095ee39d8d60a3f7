// Qwen3-MoE and Llama (llama3 RoPE) adapters against Hugging Face fp32 logits of tiny random checkpoints
// made by scripts/make_parity_fixtures.py (transformers 5.17): full prefill and chunked prefill + decode.
#include <gtest/gtest.h>

#include "parity_util.h"
#include "runtime/engine.h"

namespace gridq::runtime {
namespace {

using testing::compare_logits;
using testing::expect_parity;
using testing::repo_path;

void run_arch(const std::string& name) {
  auto fx = testing::load_fixture(repo_path("tests/fixtures/" + name + ".hf-logits.safetensors"));
  ASSERT_GT(fx.B, 0);
  EngineOptions eo;
  eo.prefill_chunk = 7;  // chunk boundaries inside the sequence
  auto eng = Engine::open(repo_path("tests/fixtures/" + name), eo);
  ASSERT_TRUE(eng.ok()) << eng.message();
  ASSERT_EQ((*eng)->vocab_size(), fx.V);
  for (int64_t b = 0; b < fx.B; ++b) {
    std::span<const int32_t> row(fx.ids.data() + b * fx.T, static_cast<size_t>(fx.T));
    const float* ref = fx.logits.data() + b * fx.T * fx.V;
    // One forward over the whole row.
    SeqId s = (*eng)->create_sequence();
    BatchItem it{s, row, LogitsMode::kAll};
    auto full = (*eng)->forward(std::span<const BatchItem>(&it, 1));
    ASSERT_TRUE(full.ok()) << full.message();
    expect_parity(compare_logits(ref, full->data(), fx.T, fx.V), (name + " full").c_str());
    (*eng)->free_sequence(s);
    // Chunked prefill of the first half, then decode.
    s = (*eng)->create_sequence();
    const int64_t half = fx.T / 2;
    auto lg = (*eng)->prefill(s, row.subspan(0, static_cast<size_t>(half)), LogitsMode::kAll);
    ASSERT_TRUE(lg.ok()) << lg.message();
    std::vector<float> all = *lg;
    for (int64_t p = half; p < fx.T; ++p) {
      SeqId ids[1] = {s};
      auto d = (*eng)->decode(ids, row.subspan(static_cast<size_t>(p), 1));
      ASSERT_TRUE(d.ok()) << d.message();
      all.insert(all.end(), d->begin(), d->end());
    }
    expect_parity(compare_logits(ref, all.data(), fx.T, fx.V), (name + " chunked+decode").c_str());
    (*eng)->free_sequence(s);
  }
}

TEST(ArchParity, Qwen3MoeTiny) { run_arch("qwen3-moe-tiny"); }
TEST(ArchParity, LlamaTinyLlama3Rope) { run_arch("llama-tiny"); }

}  // namespace
}  // namespace gridq::runtime

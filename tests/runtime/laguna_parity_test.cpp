// The CPU forward against Hugging Face transformers' fp32 logits (laguna.md §1.7): full prefill, chunked
// prefill + token-by-token decode, and a batch of two sequences of different lengths in one forward.
#include <gtest/gtest.h>

#include "parity_util.h"
#include "runtime/engine.h"

namespace gridq::runtime {
namespace {

using testing::compare_logits;
using testing::expect_parity;
using testing::repo_path;

class LagunaParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fx_ = new testing::Fixture(testing::load_fixture(repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors")));
    auto e = Engine::open(repo_path("models/laguna-tiny-code"), EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.message();
    eng_ = std::move(*e).release();
  }
  static void TearDownTestSuite() {
    delete eng_;
    delete fx_;
  }
  std::span<const int32_t> row(int64_t b) const {
    return std::span<const int32_t>(fx_->ids.data() + b * fx_->T, static_cast<size_t>(fx_->T));
  }
  const float* ref(int64_t b) const { return fx_->logits.data() + b * fx_->T * fx_->V; }
  static testing::Fixture* fx_;
  static Engine* eng_;
};
testing::Fixture* LagunaParity::fx_ = nullptr;
Engine* LagunaParity::eng_ = nullptr;

TEST_F(LagunaParity, FullPrefill) {
  ASSERT_EQ(fx_->V, eng_->vocab_size());
  for (int64_t b = 0; b < fx_->B; ++b) {
    SeqId s = eng_->create_sequence();
    auto lg = eng_->prefill(s, row(b), LogitsMode::kAll);
    ASSERT_TRUE(lg.ok()) << lg.message();
    ASSERT_EQ(static_cast<int64_t>(lg->size()), fx_->T * fx_->V);
    expect_parity(compare_logits(ref(b), lg->data(), fx_->T, fx_->V), "laguna full prefill");
    eng_->free_sequence(s);
  }
}

TEST_F(LagunaParity, ChunkedPrefillThenDecode) {
  // Chunk 48 (< 64 = window, and not a divisor of it) for the first 100 tokens, then one token at a time:
  // exercises the sliding ring across chunk boundaries and wrap-around.
  for (int64_t b = 0; b < fx_->B; ++b) {
    SeqId s = eng_->create_sequence();
    std::vector<float> all;
    const int64_t split = 100;
    for (int64_t p = 0; p < split; p += 48) {
      const int64_t n = std::min<int64_t>(48, split - p);
      BatchItem it{s, row(b).subspan(static_cast<size_t>(p), static_cast<size_t>(n)), LogitsMode::kAll};
      auto lg = eng_->forward(std::span<const BatchItem>(&it, 1));
      ASSERT_TRUE(lg.ok()) << lg.message();
      all.insert(all.end(), lg->begin(), lg->end());
    }
    for (int64_t p = split; p < fx_->T; ++p) {
      SeqId ids[1] = {s};
      auto lg = eng_->decode(ids, row(b).subspan(static_cast<size_t>(p), 1));
      ASSERT_TRUE(lg.ok()) << lg.message();
      all.insert(all.end(), lg->begin(), lg->end());
    }
    ASSERT_EQ(static_cast<int64_t>(all.size()), fx_->T * fx_->V);
    expect_parity(compare_logits(ref(b), all.data(), fx_->T, fx_->V), "laguna chunked+decode");
    // Chunked and full prefill must agree far more tightly than either agrees with HF.
    SeqId s2 = eng_->create_sequence();
    auto full = eng_->prefill(s2, row(b), LogitsMode::kAll);
    ASSERT_TRUE(full.ok());
    auto c = compare_logits(full->data(), all.data(), fx_->T, fx_->V);
    std::printf("[parity] chunked vs full: max|d| %.3g\n", c.max_abs);
    EXPECT_LT(c.max_abs, 1e-4);
    eng_->free_sequence(s);
    eng_->free_sequence(s2);
  }
}

TEST_F(LagunaParity, BatchOfTwoDifferentLengths) {
  SeqId s0 = eng_->create_sequence(), s1 = eng_->create_sequence();
  const int64_t n1 = 97;  // second sequence shorter
  BatchItem items[2] = {{s0, row(0), LogitsMode::kAll}, {s1, row(1).subspan(0, n1), LogitsMode::kAll}};
  auto lg = eng_->forward(items);
  ASSERT_TRUE(lg.ok()) << lg.message();
  ASSERT_EQ(static_cast<int64_t>(lg->size()), (fx_->T + n1) * fx_->V);
  expect_parity(compare_logits(ref(0), lg->data(), fx_->T, fx_->V), "laguna batch item 0");
  expect_parity(compare_logits(ref(1), lg->data() + fx_->T * fx_->V, n1, fx_->V), "laguna batch item 1");
  // Continue the short one by decoding the rest, batched with nothing else.
  for (int64_t p = n1; p < fx_->T; ++p) {
    SeqId ids[1] = {s1};
    auto d = eng_->decode(ids, row(1).subspan(static_cast<size_t>(p), 1));
    ASSERT_TRUE(d.ok());
    auto c = compare_logits(ref(1) + p * fx_->V, d->data(), 1, fx_->V);
    EXPECT_EQ(c.argmax_mismatch, 0);
    EXPECT_LT(c.max_abs, 1e-2);
  }
  eng_->free_sequence(s0);
  eng_->free_sequence(s1);
}

}  // namespace
}  // namespace gridq::runtime

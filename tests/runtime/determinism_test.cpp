// Greedy decoding is batch invariant: the same tokens (and bit-identical logits) whether a sequence is
// decoded alone or together with three others of different lengths.
#include <gtest/gtest.h>

#include "parity_util.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace gridq::runtime {
namespace {

TEST(Determinism, GreedyBatch1EqualsBatch4) {
  auto fx = testing::load_fixture(testing::repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors"));
  auto eng = Engine::open(testing::repo_path("models/laguna-tiny-code"), {});
  ASSERT_TRUE(eng.ok()) << eng.message();
  Engine& e = **eng;
  const int steps = 12;
  const size_t lens[4] = {20, 35, 50, 70};
  auto prompt = [&](int i) {
    return std::span<const int32_t>(fx.ids.data() + (i % 2) * fx.T + 10 * i, lens[i]);
  };
  // Batch 1.
  std::vector<std::vector<int32_t>> solo(4);
  std::vector<std::vector<float>> solo_logits(4);
  for (int i = 0; i < 4; ++i) {
    SeqId s = e.create_sequence();
    auto lg = e.prefill(s, prompt(i));
    ASSERT_TRUE(lg.ok());
    for (int t = 0; t < steps; ++t) {
      const int32_t id = argmax(*lg);
      solo[static_cast<size_t>(i)].push_back(id);
      SeqId ids[1] = {s};
      int32_t tk[1] = {id};
      lg = e.decode(ids, tk);
      ASSERT_TRUE(lg.ok());
    }
    solo_logits[static_cast<size_t>(i)] = *lg;
    e.free_sequence(s);
  }
  // Batch 4: prompts prefilled together in one forward, then decoded together.
  std::vector<SeqId> seqs;
  std::vector<BatchItem> items;
  for (int i = 0; i < 4; ++i) {
    seqs.push_back(e.create_sequence());
    items.push_back(BatchItem{seqs.back(), prompt(i), LogitsMode::kLast});
  }
  auto lg = e.forward(items);
  ASSERT_TRUE(lg.ok());
  const int64_t V = e.vocab_size();
  std::vector<std::vector<int32_t>> batched(4);
  for (int t = 0; t < steps; ++t) {
    std::vector<int32_t> next;
    for (int i = 0; i < 4; ++i) {
      next.push_back(argmax(std::span<const float>(lg->data() + i * V, static_cast<size_t>(V))));
      batched[static_cast<size_t>(i)].push_back(next.back());
    }
    lg = e.decode(seqs, next);
    ASSERT_TRUE(lg.ok());
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(solo[static_cast<size_t>(i)], batched[static_cast<size_t>(i)]) << "sequence " << i;
    EXPECT_EQ(0, std::memcmp(solo_logits[static_cast<size_t>(i)].data(), lg->data() + i * V, static_cast<size_t>(V) * 4))
        << "sequence " << i << " final logits differ in bits";
  }
  for (auto s : seqs) e.free_sequence(s);
}

}  // namespace
}  // namespace gridq::runtime

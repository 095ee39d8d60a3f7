// The CPU engine gives the same bits with 1, 2 and 3 threads (more threads than this machine's cores
// included): a chunked prefill and greedy decode steps on the bundled model, every logit compared.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "parity_util.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace gridq::runtime {
namespace {

std::vector<float> run(int threads, const testing::Fixture& fx) {
  EngineOptions o;
  o.threads = threads;
  o.prefill_chunk = 37;  // chunks of prefill and a last short one
  auto eng = Engine::open(testing::repo_path("models/laguna-tiny-code"), o);
  EXPECT_TRUE(eng.ok()) << eng.message();
  if (!eng.ok()) return {};
  Engine& e = **eng;
  const int64_t n = testing::kSanitized ? 40 : std::min<int64_t>(fx.T, 120);
  SeqId s = e.create_sequence();
  auto lg = e.prefill(s, std::span<const int32_t>(fx.ids.data(), static_cast<size_t>(n)), LogitsMode::kAll);
  EXPECT_TRUE(lg.ok());
  std::vector<float> all = *lg;
  std::vector<float> last(all.end() - e.vocab_size(), all.end());
  for (int step = 0; step < (testing::kSanitized ? 3 : 10); ++step) {
    SeqId ids[1] = {s};
    int32_t tk[1] = {argmax(last)};
    auto d = e.decode(ids, tk);
    EXPECT_TRUE(d.ok());
    last = *d;
    all.insert(all.end(), last.begin(), last.end());
  }
  return all;
}

TEST(CpuThreads, LogitsAreBitIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  auto fx =
      testing::load_fixture(testing::repo_path("tests/fixtures/laguna-tiny-code.hf-logits.safetensors"));
  const auto one = run(1, fx);
  ASSERT_FALSE(one.empty());
  for (int threads : {2, 3}) {
    const auto many = run(threads, fx);
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float))) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace gridq::runtime

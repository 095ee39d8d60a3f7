// The CPU engine gives the same bits with 1, 2 and 3 threads (more threads than this machine's cores
// included): a chunked prefill and greedy decode steps on the bundled model, every logit compared.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "greedy_logits.h"
#include "parity_util.h"
#include "runtime/engine.h"

namespace gridq::runtime {
namespace {

std::vector<float> run(int threads, const testing::Fixture& fx) {
  EngineOptions o;
  o.threads = threads;
  o.prefill_chunk = 37;  // chunks of prefill and a last short one
  auto eng = Engine::open(testing::repo_path("models/laguna-tiny-code"), o);
  EXPECT_TRUE(eng.ok()) << eng.message();
  if (!eng.ok()) return {};
  const int64_t n = testing::kSanitized ? 40 : std::min<int64_t>(fx.T, 120);
  return testing::prefill_then_greedy(**eng, std::span<const int32_t>(fx.ids.data(), static_cast<size_t>(n)),
                                      testing::kSanitized ? 3 : 10);
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

// Prompt scoring (issue 14 item 8: completions echo + logprobs, what lm-evaluation-harness's loglikelihood
// requests need): the scheduler reports the raw logprob of every prompt token after the first, computed from
// the logits of the position before it, whatever the prefill chunking; generation is unchanged by it; and
// max_tokens 0 scores without generating.
#include <gtest/gtest.h>

#include "fake_engine.h"
#include "recorder.h"
#include "serve/scheduler.h"

namespace gridq::serve {
namespace {

using testing::FakeEngine;
using testing::make_req;
constexpr int32_t kV = 300, kLo = 10, kHi = 60;

// The expected report for prompt[i]: runtime/sampler.h step 8 over the fake logits of prompt[0..i-1].
runtime::SampledToken expected(const std::vector<int32_t>& prompt, size_t i, int top) {
  std::vector<int32_t> hist(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(i));
  auto row = testing::fake_logits(hist, kV, kLo, kHi);
  runtime::SampledToken t;
  t.token = prompt[i];
  runtime::add_logprobs(row, top, t);
  return t;
}

TEST(PromptScoring, EveryPromptTokenScoredAtAnyChunking) {
  const std::vector<int32_t> prompt = {11, 40, 12, 33, 57, 20, 21, 45, 13};
  for (int64_t budget : {1, 3, 512}) {
    SCOPED_TRACE(budget);
    FakeEngine eng(kV, 512, kLo, kHi);
    SchedulerOptions opts;
    opts.max_batch_tokens = budget;
    Scheduler s(eng, opts, nullptr);
    s.start();
    auto plain = make_req(prompt, 4);
    auto scored = make_req(prompt, 4);
    scored->prompt_logprobs = true;
    scored->top_logprobs = 2;
    ASSERT_FALSE(s.submit(plain).has_value());
    ASSERT_FALSE(s.submit(scored).has_value());
    ASSERT_TRUE(plain->wait());
    ASSERT_TRUE(scored->wait());
    EXPECT_EQ(scored->out[0], plain->out[0]) << "scoring must not change what is generated";
    ASSERT_EQ(scored->prompt_lps.size(), prompt.size() - 1);
    for (size_t i = 1; i < prompt.size(); ++i) {
      const auto want = expected(prompt, i, 2);
      const auto& got = scored->prompt_lps[i - 1];
      EXPECT_EQ(got.token, prompt[i]);
      EXPECT_FLOAT_EQ(got.logprob, want.logprob) << i;
      ASSERT_EQ(got.top.size(), want.top.size());
      for (size_t a = 0; a < want.top.size(); ++a) EXPECT_EQ(got.top[a].first, want.top[a].first);
    }
    s.stop();
  }
}

TEST(PromptScoring, MaxTokensZeroScoresWithoutGenerating) {
  FakeEngine eng(kV, 512, kLo, kHi);
  Scheduler s(eng, {}, nullptr);
  s.start();
  const std::vector<int32_t> prompt = {14, 15, 16, 17};
  auto r = make_req(prompt, 0);
  r->prompt_logprobs = true;
  ASSERT_FALSE(s.submit(r).has_value());
  ASSERT_TRUE(r->wait());
  EXPECT_TRUE(r->out[0].empty());
  EXPECT_EQ(r->reasons[0], FinishReason::kLength);
  EXPECT_EQ(r->prompt_lps.size(), prompt.size() - 1);
  EXPECT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(2)));
  EXPECT_EQ(eng.live_sequences(), 0u);
  s.stop();
}

}  // namespace
}  // namespace gridq::serve

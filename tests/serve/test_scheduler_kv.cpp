// KV-page admission and preemption against the fake engine, whose forward fails when the pages in use
// exceed its pool (so a scheduler that overcommits fails these tests): a request that can never fit is
// refused at submit; a cache smaller than the concurrent demand preempts the newest requests, and every
// request still gets exactly its reference output (greedy and seeded), finishing in order of arrival.
#include <gtest/gtest.h>

#include "fake_engine.h"
#include "recorder.h"
#include "serve/scheduler.h"

namespace gridq::serve {
namespace {

using testing::FakeEngine;
using testing::make_req;
using testing::Recorder;
constexpr int32_t kV = 300, kLo = 10, kHi = 60;

std::vector<int32_t> prompt_of(int i, size_t len) {
  std::vector<int32_t> p(len);
  for (size_t j = 0; j < len; ++j) p[j] = kLo + static_cast<int32_t>((i * 7 + j * 3) % (kHi - kLo));
  return p;
}

TEST(SchedulerKv, NeverFitsIsRefusedAtSubmitNamingTheNumbers) {
  FakeEngine eng(kV, 512, kLo, kHi);
  eng.pages = 8;  // 32 tokens
  Scheduler s(eng, {}, nullptr);
  auto big = make_req(prompt_of(0, 10), 30);  // 40 tokens = 10 pages
  auto e = s.submit(big);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->code, "kv_cache_too_small");
  EXPECT_NE(e->message.find("10 KV pages"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("holds 8 pages"), std::string::npos) << e->message;
  // n choices count n times: 2 × 20 tokens = 10 pages.
  auto two = make_req(prompt_of(1, 10), 10, 2);
  ASSERT_TRUE(s.submit(two).has_value());
  // Past max_model_len: refused as well.
  FakeEngine small(kV, 16, kLo, kHi);
  Scheduler s2(small, {}, nullptr);
  auto e2 = s2.submit(make_req(prompt_of(2, 16), 4));
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->code, "context_length_exceeded");
  // Exactly the whole cache fits (and runs).
  auto fits = make_req(prompt_of(3, 12), 20);  // 32 tokens = 8 pages
  ASSERT_FALSE(s.submit(fits).has_value());
  s.start();
  ASSERT_TRUE(fits->wait());
  EXPECT_EQ(fits->out[0].size(), 20u);
  s.stop();
}

void run_under_pressure(float temperature, int n) {
  // Reference: every request alone on an unbounded engine.
  std::vector<std::vector<std::vector<int32_t>>> alone;
  constexpr int kReqs = 8;
  for (int i = 0; i < kReqs; ++i) {
    FakeEngine eng(kV, 512, kLo, kHi);
    Scheduler s(eng, {}, nullptr);
    s.start();
    auto r = make_req(prompt_of(i, 9), 24, n, temperature, 100 + i);
    ASSERT_FALSE(s.submit(r).has_value());
    ASSERT_TRUE(r->wait());
    std::vector<std::vector<int32_t>> outs;
    for (int c = 0; c < n; ++c) outs.push_back(r->out[c]);
    alone.push_back(outs);
    s.stop();
  }
  // 8 requests × n × 33 tokens (9 pages) against 20 pages of 4 tokens: about 2 fit at their longest.
  FakeEngine eng(kV, 512, kLo, kHi);
  eng.pages = 20;
  SchedulerOptions opts;
  opts.max_num_seqs = 16;
  opts.max_batch_tokens = 8;
  Metrics metrics("fake");
  Scheduler s(eng, opts, &metrics);
  std::atomic<int64_t> clock{0};
  std::vector<std::shared_ptr<Recorder>> rs;
  for (int i = 0; i < kReqs; ++i) {
    auto r = make_req(prompt_of(i, 9), 24, n, temperature, 100 + i);
    r->clock = &clock;
    rs.push_back(r);
    ASSERT_FALSE(s.submit(r).has_value());
  }
  s.start();
  for (int i = 0; i < kReqs; ++i) {
    ASSERT_TRUE(rs[i]->wait());
    EXPECT_EQ(rs[i]->error_status, 0) << rs[i]->error_code;
    for (int c = 0; c < n; ++c) EXPECT_EQ(rs[i]->out[c], alone[i][c]) << "request " << i << " choice " << c;
    EXPECT_EQ(rs[i]->finished_at, i) << "requests finish in order of arrival";
  }
  EXPECT_FALSE(s.failed()) << s.failure();
  EXPECT_GT(s.stats().preemptions, 0);
  EXPECT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(eng.live_sequences(), 0u);
  const std::string text = metrics.render();
  EXPECT_NE(
      text.find("gridq:num_preemptions_total{model_name=\"fake\"} " + std::to_string(s.stats().preemptions)),
      std::string::npos)
      << text;
  s.stop();
}

TEST(SchedulerKv, PreemptionKeepsGreedyOutputsAndArrivalOrder) { run_under_pressure(0.0f, 1); }
TEST(SchedulerKv, PreemptionKeepsSeededSamplingOfEveryChoice) { run_under_pressure(0.9f, 2); }

TEST(SchedulerKv, AFittingRequestWaitsForPagesThenRuns) {
  FakeEngine eng(kV, 512, kLo, kHi);
  eng.pages = 10;
  eng.step_delay_ms = 1;
  Scheduler s(eng, {}, nullptr);
  auto a = make_req(prompt_of(0, 20), 12);  // 32 tokens: 8 pages at its end
  auto b = make_req(prompt_of(1, 30), 6);   // 36 tokens: 9 pages; its prompt (8 pages) waits for a
  ASSERT_FALSE(s.submit(a).has_value());
  ASSERT_FALSE(s.submit(b).has_value());
  s.start();
  ASSERT_TRUE(a->wait());
  ASSERT_TRUE(b->wait());
  EXPECT_EQ(a->out[0], testing::reference_greedy(a->prompt, 12, {}, kV, kLo, kHi));
  EXPECT_EQ(b->out[0], testing::reference_greedy(b->prompt, 6, {}, kV, kLo, kHi));
  EXPECT_FALSE(s.failed()) << s.failure();
  s.stop();
}

TEST(SchedulerKv, CancellingAPreemptedRequestEndsOnlyItsUnfinishedChoices) {
  FakeEngine eng(kV, 512, kLo, kHi);
  eng.pages = 12;
  eng.step_delay_ms = 1;
  SchedulerOptions opts;
  opts.max_batch_tokens = 4;
  Scheduler s(eng, opts, nullptr);
  auto a = make_req(prompt_of(0, 8), 30), b = make_req(prompt_of(1, 8), 30);
  ASSERT_FALSE(s.submit(a).has_value());
  ASSERT_FALSE(s.submit(b).has_value());
  s.start();
  while (s.stats().preemptions == 0 && !a->wait(1)) {
  }
  b->cancelled = true;
  ASSERT_TRUE(a->wait());
  ASSERT_TRUE(b->wait());
  EXPECT_EQ(a->out[0], testing::reference_greedy(a->prompt, 30, {}, kV, kLo, kHi));
  EXPECT_EQ(b->reasons[0], FinishReason::kAbort);
  EXPECT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(eng.live_sequences(), 0u);
  s.stop();
}

}  // namespace
}  // namespace gridq::serve

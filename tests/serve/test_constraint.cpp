// Structured outputs in the server (serve/constraint.h): the compiled-grammar LRU, the per-choice mask
// hand-off through runtime::SamplePlan::allowed (stop ids only when the grammar accepts, completion ends
// the choice, reasoning first), and the scheduler hook end to end against the fake engine.
#include <gtest/gtest.h>

#include <condition_variable>
#include <regex>

#include "fake_engine.h"
#include "serve/constraint.h"
#include "serve/scheduler.h"

namespace gridq::serve {
namespace {

using grammar::InputKind;
using Verdict = ChoiceConstraint::Verdict;

// ids: 0 <eos> (special), 1 "a", 2 "b", 3 "ab", 4 "yes", 5 "no", 6 "y", 7 "x", 8 </think> (special),
// 9 "{", 10 "}", 11 "\"".
std::shared_ptr<const grammar::TokenVocab> small_vocab() {
  std::vector<std::string> bytes = {"<eos>", "a", "b",        "ab", "yes", "no",
                                    "y",     "x", "</think>", "{",  "}",   "\""};
  std::vector<bool> special(bytes.size(), false);
  special[0] = special[8] = true;
  return std::make_shared<const grammar::TokenVocab>(bytes, special, std::vector<int32_t>{0});
}

std::vector<int32_t> allowed_ids(const runtime::SamplePlan& p) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < p.allowed.size() * 64; ++i)
    if ((p.allowed[i >> 6] >> (i & 63)) & 1) out.push_back(static_cast<int32_t>(i));
  return out;
}

TEST(GrammarCache, HitsMissesAndBoundedEviction) {
  GrammarCache cache(small_vocab(), 2);
  auto a1 = cache.get({InputKind::kRegex, "a+", false, "p"});
  ASSERT_TRUE(a1.ok()) << a1.message();
  auto a2 = cache.get({InputKind::kRegex, "a+", false, "p"});
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a1->get(), a2->get());
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  // Same text, another kind or whitespace mode: another entry.
  auto ws = cache.get({InputKind::kRegex, "a+", true, "p"});
  ASSERT_TRUE(ws.ok());
  EXPECT_NE(ws->get(), a1->get());
  auto c = cache.get({InputKind::kChoice, R"(["a"])", false, "p"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(cache.misses(), 3u);
  // Capacity 2: "a+" (least recently used) was evicted and compiles again; the old one stays usable.
  auto a3 = cache.get({InputKind::kRegex, "a+", false, "p"});
  ASSERT_TRUE(a3.ok());
  EXPECT_NE(a3->get(), a1->get());
  EXPECT_EQ(cache.misses(), 4u);
  ChoiceConstraint old(*a1, {0});
  runtime::SamplePlan p;
  old.constrain(p);
  EXPECT_EQ(allowed_ids(p), (std::vector<int32_t>{1}));
}

TEST(GrammarCache, CompileErrorsNameTheFeature) {
  GrammarCache cache(small_vocab());
  auto e = cache.get({InputKind::kJsonSchema, R"({"type":"object","not":{}})", false, "p"});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("not"), std::string::npos) << e.message();
  auto r = cache.get({InputKind::kRegex, "(a)\\1", false, "p"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(cache.hits(), 0u);
}

TEST(ChoiceConstraint, MaskStopIdsOnlyWhenAcceptingAndCompletion) {
  GrammarCache cache(small_vocab());
  // Choice: "yes" or "no". Not accepting at the start, so no stop id; a whole choice completes the output.
  auto ch = cache.get({InputKind::kChoice, R"(["yes","no"])", false, "p"});
  ASSERT_TRUE(ch.ok());
  ChoiceConstraint c(*ch, {0});
  runtime::SamplePlan p;
  c.constrain(p);
  EXPECT_EQ(allowed_ids(p), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(c.accept(4), Verdict::kComplete);

  // a+b with stop_token_ids [2] ("b" as a stop id): before the grammar accepts, the stop id "b" is masked
  // out even though the grammar would take its text; "ab" still gets there.
  auto g = cache.get({InputKind::kRegex, "a+b?", false, "p"});
  ASSERT_TRUE(g.ok());
  ChoiceConstraint r(*g, {0, 2});
  runtime::SamplePlan p1;
  r.constrain(p1);
  EXPECT_EQ(allowed_ids(p1), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.accept(1), Verdict::kContinue);
  runtime::SamplePlan p2;
  r.constrain(p2);  // accepting now: EOS and the stop id are allowed, and more a's
  EXPECT_EQ(allowed_ids(p2), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(r.accept(3), Verdict::kComplete);  // "aab": nothing may follow

  // A token outside the mask is rejected with a message (never advanced).
  ChoiceConstraint bad(*g, {0});
  runtime::SamplePlan p3;
  bad.constrain(p3);
  EXPECT_EQ(bad.accept(7), Verdict::kRejected);
  EXPECT_NE(bad.error().find("token 7"), std::string::npos) << bad.error();
  EXPECT_EQ(bad.matcher().position(), 0u);
}

TEST(ChoiceConstraint, ReasoningFirstThenTheGrammar) {
  GrammarCache cache(small_vocab());
  auto g = cache.get({InputKind::kJsonObject, "", false, "p"});
  ASSERT_TRUE(g.ok());
  ChoiceConstraint c(*g, {0}, /*wait_for=*/8);
  runtime::SamplePlan p = runtime::Sampler(runtime::SamplingParams{}).plan(12, {}, {});
  p.edits.push_back(runtime::ScoreEdit{5, false, false, 0.0, 1.0});  // an existing edit (a bias on id 5)
  c.constrain(p);
  EXPECT_TRUE(p.allowed.empty());  // free text while reasoning...
  ASSERT_EQ(p.edits.size(), 2u);   // ...that may not stop: id 0 banned, sorted before id 5
  EXPECT_EQ(p.edits[0].id, 0);
  EXPECT_TRUE(p.edits[0].banned);
  EXPECT_EQ(p.edits[1].id, 5);
  EXPECT_FALSE(p.edits[1].banned);
  EXPECT_EQ(c.accept(7), Verdict::kContinue);
  EXPECT_FALSE(c.active());
  EXPECT_EQ(c.accept(8), Verdict::kContinue);
  EXPECT_TRUE(c.active());
  runtime::SamplePlan q;
  c.constrain(q);
  EXPECT_EQ(allowed_ids(q), (std::vector<int32_t>{9}));  // "{"
}

TEST(ChoiceConstraint, BanIdsMergesIntoSortedEdits) {
  runtime::SamplePlan p;
  p.edits = {runtime::ScoreEdit{2, true, false, 0.5, 0.0}, runtime::ScoreEdit{9, false, false, 0.0, 1.0}};
  ban_ids(p, {9, 0, 5});
  ASSERT_EQ(p.edits.size(), 4u);
  const int32_t ids[] = {0, 2, 5, 9};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(p.edits[i].id, ids[i]);
  EXPECT_TRUE(p.edits[0].banned && p.edits[2].banned && p.edits[3].banned);
  EXPECT_FALSE(p.edits[1].banned);
  EXPECT_DOUBLE_EQ(p.edits[3].bias, 1.0);
}

// The scheduler hook end to end: the fake engine's ids 10..59 spell one lowercase letter each; a regex
// constraint makes every choice (greedy and seeded, n = 3, batched with an unconstrained request) match,
// end with "stop" as soon as the grammar is complete, and repeat exactly on a second run.
constexpr int32_t kV = 300, kLo = 10, kHi = 60;

class ConstrainedRecorder final : public SchedRequest {
 public:
  bool on_token(int c, const runtime::SampledToken& t) override {
    std::lock_guard lk(mu);
    Verdict v = cons.empty() ? Verdict::kContinue : cons[c]->accept(t.token);
    if (v == Verdict::kRejected) rejected = true;
    out[c].push_back(t.token);
    return v != Verdict::kContinue;
  }
  void on_choice_done(int c, FinishReason r) override {
    std::lock_guard lk(mu);
    reasons[c] = r;
    if (++done == n) cv.notify_all();
  }
  void on_error(int, const std::string&, const std::string&) override {}
  void constrain(int c, runtime::SamplePlan& plan) override {
    if (!cons.empty()) cons[c]->constrain(plan);
  }
  bool wait() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(20), [&] { return done >= n; });
  }
  std::vector<std::unique_ptr<ChoiceConstraint>> cons;
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> out;
  std::map<int, FinishReason> reasons;
  int done = 0;
  bool rejected = false;
};

std::map<int, std::vector<int32_t>> run_constrained(float temperature, std::map<int, FinishReason>& reasons) {
  std::vector<std::string> bytes(kV);
  for (int32_t i = kLo; i < kHi; ++i) bytes[i] = std::string(1, static_cast<char>('a' + (i - kLo) % 26));
  bytes[1] = "<eos>";
  std::vector<bool> special(kV, false);
  special[1] = true;
  GrammarCache cache(std::make_shared<const grammar::TokenVocab>(bytes, special, std::vector<int32_t>{1}));
  auto g = cache.get({InputKind::kRegex, "[a-e]{2,4}x", false, "p"});
  EXPECT_TRUE(g.ok()) << g.message();
  testing::FakeEngine eng(kV, 512, kLo, kHi);
  Scheduler s(eng, SchedulerOptions{}, nullptr);
  auto req = std::make_shared<ConstrainedRecorder>();
  req->prompt = {11, 12, 13};
  req->n = 3;
  req->max_tokens = 20;
  req->stop_ids = {1};
  for (int c = 0; c < 3; ++c) {
    runtime::SamplingParams sp;
    sp.temperature = temperature;
    sp.seed = 100 + static_cast<uint64_t>(c);
    req->sampling.push_back(sp);
    req->cons.push_back(std::make_unique<ChoiceConstraint>(*g, req->stop_ids));
  }
  auto free_req = std::make_shared<ConstrainedRecorder>();  // shares the steps, unconstrained
  free_req->prompt = {20, 21};
  free_req->max_tokens = 6;
  free_req->sampling.push_back(runtime::SamplingParams{});
  EXPECT_FALSE(s.submit(req).has_value());
  EXPECT_FALSE(s.submit(free_req).has_value());
  s.start();
  EXPECT_TRUE(req->wait());
  EXPECT_TRUE(free_req->wait());
  s.stop();
  EXPECT_FALSE(req->rejected);
  reasons = req->reasons;
  return req->out;
}

TEST(ChoiceConstraint, SchedulerAppliesTheMaskEveryStep) {
  const std::regex re("[a-e]{2,4}x");
  for (float temperature : {0.0f, 1.0f}) {
    std::map<int, FinishReason> reasons, reasons2;
    auto out = run_constrained(temperature, reasons);
    for (int c = 0; c < 3; ++c) {
      std::string text;
      for (int32_t t : out[c]) {
        ASSERT_GE(t, kLo);
        ASSERT_LT(t, kHi);
        text += static_cast<char>('a' + (t - kLo) % 26);
      }
      EXPECT_TRUE(std::regex_match(text, re)) << text;
      EXPECT_EQ(reasons[c], FinishReason::kStop);
    }
    EXPECT_EQ(run_constrained(temperature, reasons2), out) << "greedy and seeded output repeats";
  }
}

}  // namespace
}  // namespace gridq::serve

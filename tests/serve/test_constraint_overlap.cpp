// Structured-output masks overlapped with the model step (serve/constraint.h): the scheduler starts each
// constrained row's mask (prepare_constraint) before the forward and collects it (constrain) after, when
// the engine samples on the host; outputs are the same as with masks computed before the step (an engine
// that samples elsewhere); a mask never collected does not let a token through; a choice destroyed with
// its mask still being computed waits for it.
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

constexpr int32_t kV = 300, kLo = 10, kHi = 60;  // ids 10..59 spell one lowercase letter each

// The fake engine, claiming to sample off the host: the scheduler then constrains before forward_sampled.
class OffHostEngine final : public EngineIface {
 public:
  explicit OffHostEngine(testing::FakeEngine& e) : e_(e) {}
  int32_t vocab_size() const override { return e_.vocab_size(); }
  int64_t max_model_len() const override { return e_.max_model_len(); }
  runtime::KvPageStats kv_pages() const override { return e_.kv_pages(); }
  int64_t kv_pages_needed(SeqId id, int64_t n) const override { return e_.kv_pages_needed(id, n); }
  Status add_sequence(SeqId id) override { return e_.add_sequence(id); }
  void remove_sequence(SeqId id) override { e_.remove_sequence(id); }
  Status forward(std::span<const StepItem> items, std::vector<float>& logits) override {
    return e_.forward(items, logits);
  }
  bool samples_on_host() const override { return false; }

 private:
  testing::FakeEngine& e_;
};

class Recorder final : public SchedRequest {
 public:
  explicit Recorder(const testing::FakeEngine* eng) : eng_(eng) {}
  bool on_token(int c, const runtime::SampledToken& t) override {
    std::lock_guard lk(mu);
    Verdict v = cons.empty() ? Verdict::kContinue : cons[c]->accept(t.token);
    if (v == Verdict::kRejected) rejected = true;
    out[c].push_back(t.token);
    return v != Verdict::kContinue;
  }
  void on_choice_done(int, FinishReason) override {
    std::lock_guard lk(mu);
    if (++done == n) cv.notify_all();
  }
  void on_error(int, const std::string&, const std::string&) override {}
  void prepare_constraint(int c) override {
    prepared_at.push_back(eng_->forwards_started.load());
    if (!cons.empty()) cons[c]->prepare();
  }
  void constrain(int c, runtime::SamplePlan& plan) override {
    constrained_at.push_back(eng_->forwards_started.load());
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
  int done = 0;
  bool rejected = false;
  std::vector<int64_t> prepared_at, constrained_at;  // forwards started when called (scheduler thread)

 private:
  const testing::FakeEngine* eng_;
};

struct Outcome {
  std::map<int, std::vector<int32_t>> out, free_out;
  std::vector<int64_t> prepared_at, constrained_at;
};

Outcome run(float temperature, bool on_host) {
  std::vector<std::string> bytes(kV);
  for (int32_t i = kLo; i < kHi; ++i) bytes[i] = std::string(1, static_cast<char>('a' + (i - kLo) % 26));
  bytes[1] = "<eos>";
  std::vector<bool> special(kV, false);
  special[1] = true;
  GrammarCache cache(std::make_shared<const grammar::TokenVocab>(bytes, special, std::vector<int32_t>{1}));
  auto g = cache.get({InputKind::kRegex, "[a-e]{2,4}x(y|zz)[a-q]*w", false, "p"});
  EXPECT_TRUE(g.ok()) << g.message();
  testing::FakeEngine fake(kV, 512, kLo, kHi);
  OffHostEngine off(fake);
  Scheduler s(on_host ? static_cast<EngineIface&>(fake) : off, SchedulerOptions{}, nullptr);
  auto req = std::make_shared<Recorder>(&fake);
  req->prompt = {11, 12, 13};
  req->n = 3;
  req->max_tokens = 24;
  req->stop_ids = {1};
  for (int c = 0; c < 3; ++c) {
    runtime::SamplingParams sp;
    sp.temperature = temperature;
    sp.seed = 7 + static_cast<uint64_t>(c);
    req->sampling.push_back(sp);
    req->cons.push_back(std::make_unique<ChoiceConstraint>(*g, req->stop_ids));
  }
  auto free_req = std::make_shared<Recorder>(&fake);  // shares the steps, unconstrained
  free_req->prompt = {20, 21};
  free_req->max_tokens = 8;
  free_req->sampling.push_back(runtime::SamplingParams{});
  EXPECT_FALSE(s.submit(req).has_value());
  EXPECT_FALSE(s.submit(free_req).has_value());
  s.start();
  EXPECT_TRUE(req->wait());
  EXPECT_TRUE(free_req->wait());
  s.stop();
  EXPECT_FALSE(req->rejected);
  return {req->out, free_req->out, req->prepared_at, req->constrained_at};
}

TEST(ConstraintOverlap, MaskCollectedAfterTheForwardStarted) {
  Outcome r = run(0.0f, /*on_host=*/true);
  ASSERT_FALSE(r.prepared_at.empty());
  ASSERT_EQ(r.prepared_at.size(), r.constrained_at.size());
  for (size_t i = 0; i < r.prepared_at.size(); ++i)
    EXPECT_EQ(r.constrained_at[i], r.prepared_at[i] + 1) << "row " << i << ": prepared, forward, constrained";
  Outcome before = run(0.0f, /*on_host=*/false);  // masks before the step, as an off-host engine needs
  for (size_t i = 0; i < before.prepared_at.size(); ++i)
    EXPECT_EQ(before.constrained_at[i], before.prepared_at[i]);
}

TEST(ConstraintOverlap, SameOutputsAsMasksBeforeTheStep) {
  const std::regex re("[a-e]{2,4}x(y|zz)[a-q]*w");
  for (float temperature : {0.0f, 1.0f}) {
    Outcome a = run(temperature, true), b = run(temperature, false);
    EXPECT_EQ(a.out, b.out) << "temperature " << temperature;
    EXPECT_EQ(a.free_out, b.free_out);
    for (int c = 0; c < 3; ++c) {
      std::string text;
      for (int32_t t : a.out[c]) text += static_cast<char>('a' + (t - kLo) % 26);
      if (a.out[c].size() < 24) {
        EXPECT_TRUE(std::regex_match(text, re)) << text;
      }
    }
    EXPECT_EQ(run(temperature, true).out, a.out) << "repeats";
  }
}

std::shared_ptr<CompiledGrammar> letters_grammar(GrammarCache& cache) {
  auto g = cache.get({InputKind::kRegex, "[a-c]+", false, "p"});
  EXPECT_TRUE(g.ok());
  return *g;
}

GrammarCache letters_cache() {
  std::vector<std::string> bytes = {"<eos>", "a", "b", "c", "d"};
  std::vector<bool> special = {true, false, false, false, false};
  return GrammarCache(std::make_shared<const grammar::TokenVocab>(bytes, special, std::vector<int32_t>{0}));
}

TEST(ConstraintOverlap, UncollectedMaskLetsNoTokenThrough) {
  auto cache = letters_cache();
  ChoiceConstraint c(letters_grammar(cache), {0});
  c.prepare();
  EXPECT_EQ(c.accept(1), Verdict::kRejected);  // sampled without its mask: refused, not trusted
  EXPECT_EQ(c.matcher().position(), 0u);
}

TEST(ConstraintOverlap, PreparedMaskEqualsInlineAndDestroyWaits) {
  auto cache = letters_cache();
  auto g = letters_grammar(cache);
  ChoiceConstraint a(g, {0}), b(g, {0});
  for (int32_t tok : {1, 3, 2}) {
    runtime::SamplePlan pa, pb;
    a.prepare();
    a.prepare();  // a second prepare while one is under way is a no-op
    a.constrain(pa);
    b.constrain(pb);
    EXPECT_EQ(pa.allowed, pb.allowed);
    ASSERT_EQ(a.accept(tok), Verdict::kContinue);
    ASSERT_EQ(b.accept(tok), Verdict::kContinue);
  }
  for (int i = 0; i < 50; ++i) {
    auto c = std::make_unique<ChoiceConstraint>(g, std::vector<int32_t>{0});
    c->prepare();
    c.reset();  // must wait for the worker, which walks c's matcher
  }
}

}  // namespace
}  // namespace gridq::serve

// `gridq generate` and `gridq serve` sample the same tokens for the same seed and parameters: both paths run
// end to end over one fixed pseudo-random logits model (a backend whose logits are a hash of the sequence's
// history, so one different token changes every later row). The generate side is runtime::generate with the
// parameters the CLI builds (fp32 fields); the serve side is a completions request body through the protocol
// parser, serve/sampling.h's mapping, the scheduler and RuntimeEngine.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include "runtime/engine.h"
#include "runtime/generate.h"
#include "serve/openai_protocol.h"
#include "serve/runtime_engine.h"
#include "serve/sampling.h"
#include "serve/scheduler.h"
#include "text/tokenizer.h"

namespace gridq::serve {
namespace {

// Logits N(0, 2.5) per id, seeded by an FNV hash of the sequence's tokens.
class RandomLogitsBackend final : public runtime::Backend {
 public:
  explicit RandomLogitsBackend(int32_t vocab) { spec_.vocab_size = vocab; }
  const model::ModelSpec& spec() const override { return spec_; }
  Status add_sequence(runtime::SeqId id) override {
    seqs_[id] = {};
    return {};
  }
  void remove_sequence(runtime::SeqId id) override { seqs_.erase(id); }
  int64_t sequence_length(runtime::SeqId id) const override {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.size());
  }
  Status forward(std::span<const runtime::BatchItem> items, std::vector<float>& logits) override {
    for (const auto& it : items) {
      auto& hist = seqs_[it.seq];
      hist.insert(hist.end(), it.tokens.begin(), it.tokens.end());
      if (it.logits == runtime::LogitsMode::kAll) return err("random logits backend: kAll is not supported");
      if (it.logits == runtime::LogitsMode::kNone) continue;
      uint64_t h = 1469598103934665603ull;
      for (int32_t t : hist) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
      std::mt19937_64 g(h);
      std::normal_distribution<float> d(0.0f, 2.5f);
      for (int32_t i = 0; i < spec_.vocab_size; ++i) logits.push_back(d(g));
    }
    return {};
  }

 private:
  model::ModelSpec spec_;
  std::map<runtime::SeqId, std::vector<int32_t>> seqs_;
};

class Collect final : public SchedRequest {
 public:
  bool on_token(int c, const runtime::SampledToken& t) override {
    std::lock_guard lk(mu);
    out[c].push_back(t.token);
    return false;
  }
  void on_choice_done(int, FinishReason) override {
    std::lock_guard lk(mu);
    if (++done == n) cv.notify_all();
  }
  void on_error(int, const std::string&, const std::string& m) override {
    std::lock_guard lk(mu);
    error = m;
    done = n;
    cv.notify_all();
  }
  bool wait() {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(60), [&] { return done >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> out;
  int done = 0;
  std::string error;
};

struct Case {
  double temperature, top_p, min_p, repetition, presence, frequency;
  int top_k;  // the CLI's value; the request sends -1 for 0 (OpenAI's "off")
  int64_t seed;
  std::map<int32_t, double> bias;
};

class SamplingParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t =
        text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.message();
    tok_ = new text::Tokenizer(std::move(*t));
  }
  static void TearDownTestSuite() { delete tok_; }
  static int32_t vocab() { return static_cast<int32_t>(tok_->vocab_size()); }
  static std::unique_ptr<runtime::Engine> engine() {
    return runtime::Engine::from_backend(std::make_unique<RandomLogitsBackend>(vocab()), {});
  }

  // What cli/cli_model.cpp's to_params makes of the same numbers (the CLI parses them as fp32).
  static runtime::SamplingParams cli_params(const Case& c) {
    runtime::SamplingParams p;
    p.temperature = static_cast<float>(c.temperature);
    p.top_k = c.top_k;
    p.top_p = static_cast<float>(c.top_p);
    p.min_p = static_cast<float>(c.min_p);
    p.repetition_penalty = static_cast<float>(c.repetition);
    p.presence_penalty = static_cast<float>(c.presence);
    p.frequency_penalty = static_cast<float>(c.frequency);
    p.seed = static_cast<uint64_t>(c.seed);
    for (const auto& [id, b] : c.bias) p.logit_bias[id] = static_cast<float>(b);
    return p;
  }

  static std::vector<int32_t> generate_path(const runtime::SamplingParams& p,
                                            const std::vector<int32_t>& prompt, int max_tokens) {
    auto eng = engine();
    runtime::Sampler sampler(p);
    auto r = runtime::generate(*eng, *tok_, prompt, max_tokens, sampler);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  }

  // Every choice of one completions request.
  static std::map<int, std::vector<int32_t>> serve_path(const Case& c, const std::vector<int32_t>& prompt,
                                                        int max_tokens, int n) {
    ojson body = {{"model", "m"},
                  {"prompt", prompt},
                  {"max_tokens", max_tokens},
                  {"n", n},
                  {"temperature", c.temperature},
                  {"top_p", c.top_p},
                  {"top_k", c.top_k == 0 ? -1 : c.top_k},
                  {"min_p", c.min_p},
                  {"repetition_penalty", c.repetition},
                  {"presence_penalty", c.presence},
                  {"frequency_penalty", c.frequency},
                  {"seed", c.seed}};
    if (!c.bias.empty()) {
      body["logit_bias"] = ojson::object();
      for (const auto& [id, b] : c.bias) body["logit_bias"][std::to_string(id)] = b;
    }
    Limits lim;
    lim.vocab_size = vocab();
    lim.max_model_len = 4096;
    auto parsed = parse_completion_request(body, lim);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      ADD_FAILURE() << e->param << ": " << e->message;
      return {};
    }
    const GenParams& g = std::get<CompletionRequest>(parsed).gen;
    auto made = RuntimeEngine::create(engine(), 4096, false);
    EXPECT_TRUE(made.ok()) << made.message();
    if (!made.ok()) return {};
    RuntimeEngine& eng = **made;
    Scheduler sched(eng, {}, nullptr);
    sched.start();
    auto req = std::make_shared<Collect>();
    req->prompt = prompt;
    fill_sched_request(*req, g, max_tokens, {}, 0);
    EXPECT_FALSE(sched.submit(req).has_value());
    EXPECT_TRUE(req->wait());
    EXPECT_EQ(req->error, "");
    sched.stop();
    return req->out;
  }

  static text::Tokenizer* tok_;
};
text::Tokenizer* SamplingParity::tok_ = nullptr;

const std::vector<int32_t> kPrompt = {17, 923, 4051, 12, 12, 77, 3001, 5};

TEST_F(SamplingParity, GenerateAndServeGiveTheSameTokens) {
  const std::vector<Case> cases = {
      {1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0, 0, {}},
      {0.8, 0.9, 0.02, 1.1, 0.0, 0.0, 40, 123, {}},
      {1.3, 0.5, 0.0, 1.0, 0.0, 0.0, 0, 9007199254740993, {}},
      {0.7, 1.0, 0.1, 1.3, 0.0, 0.0, 5, -42, {}},
      {0.0, 1.0, 0.0, 1.5, 0.0, 0.0, 0, 7, {}},  // greedy with a repetition penalty
      {0.9, 0.95, 0.0, 1.0, 0.0, 0.0, 0, 5, {{923, 4.0}, {12, -100.0}}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const int max_tokens = 48;
    auto served = serve_path(c, kPrompt, max_tokens, 2);
    auto generated = generate_path(cli_params(c), kPrompt, max_tokens);
    ASSERT_EQ(generated.size(), static_cast<size_t>(max_tokens)) << k;
    EXPECT_EQ(served[0], generated) << "case " << k << ": choice 0 must be `gridq generate --seed " << c.seed
                                    << "`";
    // Choice 1 is the same sampler with its derived seed.
    runtime::SamplingParams p1 = cli_params(c);
    p1.seed = choice_seed(c.seed, 1);
    EXPECT_EQ(served[1], generate_path(p1, kPrompt, max_tokens)) << "case " << k;
    if (c.temperature > 0) {
      EXPECT_NE(served[0], served[1]) << "case " << k;
    }
  }
}

TEST_F(SamplingParity, PresenceAndFrequencyDifferOnlyInTheirWindow) {
  // The one intended difference: OpenAI's presence/frequency count the completion only, gridq generate's
  // count the prompt too. With the window set alike, the tokens are the same again.
  const Case c = {0.9, 0.95, 0.0, 1.0, 1.5, 0.7, 0, 31, {}};
  auto served = serve_path(c, kPrompt, 48, 1);
  runtime::SamplingParams p = cli_params(c);
  p.penalties_count_prompt = false;
  EXPECT_EQ(served[0], generate_path(p, kPrompt, 48));
}

}  // namespace
}  // namespace gridq::serve

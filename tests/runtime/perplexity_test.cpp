// Perplexity of laguna-tiny-code on the held-out code (models/README.md: 5.32 over whole files). A
// prefix of data/code-eval.txt keeps the test fast; the value is printed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "eval/perplexity.h"
#include "parity_util.h"
#include "text/tokenizer.h"

namespace gridq::eval {
namespace {

// 16 windows of 512 tokens spread evenly over the file (its first few thousand tokens are licence
// boilerplate and much harder than the rest: HF transformers gives ppl 12.2 on the first 4096 tokens and
// 5.22 on the whole file).
std::vector<int32_t> spread_windows(const text::Tokenizer& tok, const std::string& text, int n_windows, size_t window) {
  std::vector<int32_t> out;
  for (int k = 0; k < n_windows; ++k) {
    size_t o = text.size() / static_cast<size_t>(n_windows) * static_cast<size_t>(k);
    o = k == 0 ? 0 : text.find('\n', o) + 1;  // start on a line boundary (never inside a UTF-8 sequence)
    std::string piece = text.substr(o, 8192);
    piece.resize(piece.rfind('\n') + 1);
    auto ids = tok.encode(piece, false);
    EXPECT_GE(ids.size(), window);
    ids.resize(std::min(ids.size(), window));
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

TEST(Perplexity, TinyCodeOnEvalText) {
  std::ifstream f(testing::repo_path("data/code-eval.txt"), std::ios::binary);
  ASSERT_TRUE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  auto tok = text::Tokenizer::from_file(testing::repo_path("models/laguna-tiny-code/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  const int n_windows = testing::kSanitized ? 2 : 16;
  auto ids = spread_windows(*tok, text, n_windows, 512);
  ASSERT_EQ(ids.size(), static_cast<size_t>(n_windows) * 512u);
  auto eng = runtime::Engine::open(testing::repo_path("models/laguna-tiny-code"), {});
  ASSERT_TRUE(eng.ok()) << eng.message();
  PerplexityOptions o;
  o.max_tokens = 0;
  o.window = 512;
  auto r = perplexity(**eng, ids, o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::printf("[ppl] laguna-tiny-code, %lld tokens (%d windows of 512 spread over data/code-eval.txt): ppl %.4f over %lld "
              "positions (%.1f tok/s)\n",
              static_cast<long long>(r->tokens), n_windows, r->ppl, static_cast<long long>(r->positions),
              r->tokens / r->seconds);
  EXPECT_EQ(r->positions, n_windows * 511);
  if (!testing::kSanitized) {  // two windows (one of them licence boilerplate) are not a stable estimate
    EXPECT_GT(r->ppl, 4.5);
    EXPECT_LT(r->ppl, 6.5);
  } else {
    EXPECT_GT(r->ppl, 1.0);
    EXPECT_LT(r->ppl, 40.0);
  }
  // The NLL helper against a hand computation: logits (0, ln 3) -> p = (1/4, 3/4).
  const float lg[2] = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(token_nll(lg, 2, 0), std::log(4.0), 1e-7);
  EXPECT_NEAR(token_nll(lg, 2, 1), std::log(4.0 / 3.0), 1e-7);
}

}  // namespace
}  // namespace gridq::eval

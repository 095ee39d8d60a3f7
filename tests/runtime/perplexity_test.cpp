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

TEST(Perplexity, TinyCodeOnEvalText) {
  std::ifstream f(testing::repo_path("data/code-eval.txt"), std::ios::binary);
  ASSERT_TRUE(f.good());
  std::string text(64 * 1024, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  auto tok = text::Tokenizer::from_file(testing::repo_path("models/laguna-tiny-code/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto ids = tok->encode(text, false);
  ASSERT_GE(ids.size(), 4096u);
  auto eng = runtime::Engine::open(testing::repo_path("models/laguna-tiny-code"), {});
  ASSERT_TRUE(eng.ok()) << eng.message();
  PerplexityOptions o;
  o.max_tokens = 4096;
  o.window = 512;
  auto r = perplexity(**eng, ids, o);
  ASSERT_TRUE(r.ok()) << r.message();
  std::printf("[ppl] laguna-tiny-code, first %lld tokens of data/code-eval.txt, windows of 512: ppl %.4f over %lld "
              "positions (%.1f tok/s)\n",
              static_cast<long long>(r->tokens), r->ppl, static_cast<long long>(r->positions),
              r->tokens / r->seconds);
  EXPECT_EQ(r->positions, 8 * 511);
  EXPECT_GT(r->ppl, 4.5);
  EXPECT_LT(r->ppl, 6.5);
  // The NLL helper against a hand computation: logits (0, ln 3) -> p = (1/4, 3/4).
  const float lg[2] = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(token_nll(lg, 2, 0), std::log(4.0), 1e-7);
  EXPECT_NEAR(token_nll(lg, 2, 1), std::log(4.0 / 3.0), 1e-7);
}

}  // namespace
}  // namespace gridq::eval

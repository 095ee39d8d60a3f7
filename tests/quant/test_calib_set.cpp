// The calibration set (quantizer.md §2 S1: cut, holdout, hashes, fail closed) and the recompute reference of
// the identity checks (S4), split from test_capture.cpp.
#include <gtest/gtest.h>

#include "capture_test_util.h"
#include "io/sha256.h"
#include "quant/identity_check.h"

namespace gridq::quant {
namespace {

using namespace capture_test;  // the small calibration set and the shared streamed pass
using gridq::testing::repo_path;

TEST(CalibSet, CutsHoldsOutAndHashes) {
  const std::string path = small_calib_file(24000);
  CalibOptions o;
  o.tokens = 1000;  // not a multiple of seq_len: 7 sequences
  o.seq_len = 128;
  o.holdout_every = 3;
  auto cs = make_calib_set(path, tokenizer(), tokenizer_json(), o);
  ASSERT_TRUE(cs.ok()) << cs.message();
  EXPECT_EQ(cs->n_seq, 7);
  EXPECT_EQ(cs->tokens(), 7 * 128);
  EXPECT_EQ(cs->holdout, (std::vector<uint8_t>{0, 0, 1, 0, 0, 1, 0}));
  // laguna-tiny-code's post-processor adds nothing: no BOS, and the ids are the stream's first tokens.
  EXPECT_FALSE(cs->bos);
  const auto stream = tokenizer().encode(read_file(path), false);
  EXPECT_EQ(cs->stream_tokens, static_cast<int64_t>(stream.size()));
  ASSERT_GE(stream.size(), cs->ids.size());
  EXPECT_TRUE(std::equal(cs->ids.begin(), cs->ids.end(), stream.begin()));
  EXPECT_EQ(cs->text_sha256, *io::sha256_file(path));
  EXPECT_EQ(cs->tokenizer_sha256, *io::sha256_file(tokenizer_json()));
}

TEST(CalibSet, FailsClosed) {
  const std::string path = small_calib_file(4000);
  CalibOptions o;
  o.seq_len = kSeqLen;
  o.tokens = 1 << 20;
  auto cs = make_calib_set(path, tokenizer(), tokenizer_json(), o);
  ASSERT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find(path), std::string::npos) << cs.message();
  EXPECT_NE(cs.message().find("needed"), std::string::npos) << cs.message();
  EXPECT_NE(cs.message().find(std::to_string(tokenizer().encode(read_file(path)).size())), std::string::npos)
      << cs.message();
  auto missing = make_calib_set("/nonexistent/calib.txt", tokenizer(), tokenizer_json(), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent/calib.txt"), std::string::npos) << missing.message();
  o.tokens = 1024;
  o.holdout_every = 1;
  EXPECT_FALSE(make_calib_set(path, tokenizer(), tokenizer_json(), o).ok());
}

// The recompute reference notices a wrong capture (one row of u off by 5%).
TEST(IdentityCheck, RecomputeCatchesAWrongRow) {
  const Streamed& s = streamed();
  ASSERT_EQ(s.caps.size(), 4u);
  const auto& lw = s.st->weights().layers[0];
  const int64_t H = s.st->spec().hidden_size, D = lw.mlp_gate.rows;
  const InputStats& x = s.caps[0].mlp_in;
  const InputStats& u = s.caps[0].dense_down_in;
  ASSERT_EQ(x.n_hold, u.n_hold);
  const int64_t n = 16;
  RelErr ok;
  ASSERT_TRUE(recompute_swiglu_input(lw.mlp_gate, lw.mlp_up, x.holdout.data(), u.holdout.data(), n, ok).ok());
  EXPECT_LT(ok.value(), 1e-5);
  std::vector<float> bad(u.holdout.begin(), u.holdout.begin() + n * D);
  for (int64_t i = 0; i < D; ++i) bad[static_cast<size_t>(5 * D + i)] *= 1.05f;
  RelErr off;
  ASSERT_TRUE(recompute_swiglu_input(lw.mlp_gate, lw.mlp_up, x.holdout.data(), bad.data(), n, off).ok());
  EXPECT_GT(off.value(), 5e-3);
  (void)H;
}

}  // namespace
}  // namespace gridq::quant

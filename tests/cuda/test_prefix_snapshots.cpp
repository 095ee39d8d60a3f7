// Prefix caching with ring snapshots on the GPU (cuda_snapshots.cpp): a prefix hit at a page boundary where
// a snapshot was taken restores the sliding layers' rings and starts there (nothing recomputed), and its
// logits and the decode steps after it are bit-identical to the same prompt run without the cache; a hit
// without one recomputes and leaves one at its boundary for the next. The bundled model has 2 sliding layers
// of window 64: without a snapshot a hit recomputes 126 positions.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "engine_test_util.h"

namespace gridq::cuda::test {
namespace {

using testing::repo_path;

// The last logits of `tail` appended after a prefix hit (or from empty), then `steps` greedy decode steps'
// logits, all concatenated.
std::vector<float> run(runtime::Engine& e, runtime::SeqId s, std::span<const int32_t> tail, int steps) {
  std::vector<float> out;
  auto l = e.prefill(s, tail);
  EXPECT_TRUE(l.ok()) << l.message();
  if (!l.ok()) return out;
  out = *l;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(out.end() - e.vocab_size(), out.end()) -
                                              (out.end() - e.vocab_size()));
    const runtime::SeqId ids[1] = {s};
    const int32_t toks[1] = {next};
    auto d = e.decode(ids, toks);
    EXPECT_TRUE(d.ok()) << d.message();
    if (!d.ok()) return out;
    out.insert(out.end(), d->begin(), d->end());
  }
  return out;
}

TEST(CudaPrefixSnapshots, HitAtASnapshotRecomputesNothingAndMatchesUncached) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  runtime::Engine& e = *b->gpu;
  const auto p = random_prompt(11, 300, e.vocab_size());

  // The reference: caching off, the whole prompt from empty.
  auto s0 = e.create_sequence();
  const auto want = run(e, s0, p, 6);
  e.free_sequence(s0);

  ASSERT_TRUE(b->cuda->set_prefix_caching(true).ok());
  // A first sequence prefills the prompt (its last chunk is a prompt end: a snapshot at 288 = 18 pages).
  auto s1 = e.create_sequence();
  EXPECT_EQ(std::memcmp(run(e, s1, p, 0).data(), want.data(), e.vocab_size() * 4), 0);
  e.free_sequence(s1);

  // The same prompt again: 18 pages shared, rings restored at 288, 12 positions left to run.
  auto s2 = e.create_sequence();
  auto hit = e.backend().attach_prefix(s2, p);
  ASSERT_TRUE(hit.ok()) << hit.message();
  EXPECT_EQ(hit->cached, 288);
  EXPECT_EQ(hit->resume, 288) << "the snapshot at the hit's boundary was not used";
  const auto got = run(e, s2, std::span<const int32_t>(p).subspan(static_cast<size_t>(hit->resume)), 6);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
      << "logits after a snapshot restore differ from the uncached run";
  e.free_sequence(s2);

  // A prompt that shares only the first 200 tokens: no snapshot at its hit (12 pages = 192), so the hit
  // recomputes the stacked windows' reach (126 positions) and still matches its own uncached run.
  auto q = p;
  for (size_t i = 200; i < q.size(); ++i) q[i] = (q[i] + 1) % e.vocab_size();
  auto s3 = e.create_sequence();
  auto hit3 = e.backend().attach_prefix(s3, q);
  ASSERT_TRUE(hit3.ok()) << hit3.message();
  EXPECT_EQ(hit3->cached, 192);
  EXPECT_EQ(hit3->resume, 192 - 126);
  const auto got3 = run(e, s3, std::span<const int32_t>(q).subspan(static_cast<size_t>(hit3->resume)), 4);
  e.free_sequence(s3);

  // That recompute passed its hit's boundary (192) and left a snapshot there: a third prompt sharing the
  // same 200 tokens starts at 192.
  auto r = p;
  for (size_t i = 200; i < r.size(); ++i) r[i] = (r[i] + 2) % e.vocab_size();
  auto s5 = e.create_sequence();
  auto hit5 = e.backend().attach_prefix(s5, r);
  ASSERT_TRUE(hit5.ok()) << hit5.message();
  EXPECT_EQ(hit5->cached, 192);
  EXPECT_EQ(hit5->resume, 192) << "the recompute of the previous hit left no snapshot at its boundary";
  const auto got5 = run(e, s5, std::span<const int32_t>(r).subspan(static_cast<size_t>(hit5->resume)), 4);
  e.free_sequence(s5);

  ASSERT_TRUE(b->cuda->set_prefix_caching(false).ok());
  auto s4 = e.create_sequence();
  const auto want3 = run(e, s4, q, 4);
  e.free_sequence(s4);
  ASSERT_EQ(got3.size(), want3.size());
  EXPECT_EQ(std::memcmp(got3.data(), want3.data(), want3.size() * 4), 0);
  auto s6 = e.create_sequence();
  const auto want5 = run(e, s6, r, 4);
  e.free_sequence(s6);
  ASSERT_EQ(got5.size(), want5.size());
  EXPECT_EQ(std::memcmp(got5.data(), want5.data(), want5.size() * 4), 0)
      << "logits after restoring a snapshot saved mid-recompute differ from the uncached run";
  std::printf(
      "[gpu prefix] snapshot hit: cached %lld resume %lld; plain hit: cached %lld resume %lld; hit after "
      "it: cached %lld resume %lld\n",
      static_cast<long long>(hit->cached), static_cast<long long>(hit->resume),
      static_cast<long long>(hit3->cached), static_cast<long long>(hit3->resume),
      static_cast<long long>(hit5->cached), static_cast<long long>(hit5->resume));
}

}  // namespace
}  // namespace gridq::cuda::test

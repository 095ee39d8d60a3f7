// Batch invariance on the GPU (gpu-engine.md §3): a row's logits depend only on its own sequence. Checked
// bit for bit: every tiled GEMV's row 0 at M = 1…16; a decode row alone vs beside 15 other sequences; greedy
// 128-token generations run to run and alone vs among 15 others; a prompt prefilled in one call vs token
// by token. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "engine_test_util.h"
#include "runtime/sampler.h"

namespace gridq::cuda::test {
namespace {

using testing::repo_path;

std::vector<int32_t> prompt(int seed, int n, int vocab) {
  std::mt19937 r(static_cast<uint32_t>(seed));
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(r() % static_cast<uint32_t>(vocab));
  return p;
}

// Greedy generation of `steps` tokens for sequence 0 of `prompts`, all sequences decoding together.
std::vector<std::vector<int32_t>> greedy(runtime::Engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                         int steps, std::vector<std::vector<float>>* logits0 = nullptr) {
  std::vector<runtime::SeqId> ids;
  std::vector<int32_t> next;
  for (const auto& p : prompts) {
    ids.push_back(e.create_sequence());
    auto l = e.prefill(ids.back(), p);
    EXPECT_TRUE(l.ok()) << l.message();
    next.push_back(runtime::argmax(*l));
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < ids.size(); ++i) out[i].push_back(next[i]);
    auto l = e.decode(ids, next);
    EXPECT_TRUE(l.ok()) << l.message();
    if (!l.ok()) break;
    const size_t V = static_cast<size_t>(e.vocab_size());
    if (logits0) logits0->emplace_back(l->begin(), l->begin() + static_cast<long>(V));
    for (size_t i = 0; i < ids.size(); ++i)
      next[i] = runtime::argmax(std::span<const float>(l->data() + i * V, V));
  }
  for (auto id : ids) e.free_sequence(id);
  return out;
}

TEST(CudaInvariance, GreedyAloneVsBesideFifteenOthersAndRunToRun) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  const int V = b->gpu->vocab_size();
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 16; ++i) ps.push_back(prompt(100 + i, 20 + 7 * i, V));
  std::vector<std::vector<float>> l_alone, l_alone2, l_batch;
  auto alone = greedy(*b->gpu, {ps[0]}, 128, &l_alone);
  auto alone2 = greedy(*b->gpu, {ps[0]}, 128, &l_alone2);
  auto batch = greedy(*b->gpu, ps, 128, &l_batch);
  EXPECT_EQ(alone[0], alone2[0]) << "greedy run to run";
  EXPECT_EQ(alone[0], batch[0]) << "greedy alone vs beside 15 others";
  size_t same = 0;
  for (size_t s = 0; s < l_alone.size() && s < l_batch.size(); ++s)
    same += std::memcmp(l_alone[s].data(), l_batch[s].data(), l_alone[s].size() * 4) == 0;
  std::printf(
      "[gpu invariance] greedy 128 tokens: alone == beside 15 others: %s; logits bit-identical at %zu/%zu "
      "steps\n",
      alone[0] == batch[0] ? "yes" : "no", same, l_alone.size());
  EXPECT_EQ(same, l_alone.size()) << "decode logits of row 0 alone vs in a 16-row step";
}

// Decode steps replay CUDA graphs from their second occurrence: the replay must give the eager bits.
TEST(CudaInvariance, GraphReplayEqualsEager) {
  REQUIRE_GPU();
  // One backend at a time: each takes its --gpu-memory-utilization share of the device for KV.
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 5; ++i) ps.push_back(prompt(300 + i, 30 + 11 * i, 4096));
  std::vector<std::vector<float>> lg, le;
  std::vector<std::vector<int32_t>> tg, te;
  for (bool graphs : {true, false}) {
    auto b = open_both(repo_path("models/laguna-tiny-code"), false, 16, graphs);
    ASSERT_TRUE(b.ok()) << b.message();
    (graphs ? tg : te) = greedy(*b->gpu, ps, 64, graphs ? &lg : &le);
  }
  EXPECT_EQ(tg, te) << "greedy tokens, graphs vs eager";
  size_t same = 0;
  for (size_t s = 0; s < lg.size() && s < le.size(); ++s)
    same += std::memcmp(lg[s].data(), le[s].data(), lg[s].size() * 4) == 0;
  std::printf("[gpu invariance] graph replay == eager: %zu/%zu decode steps bit-identical\n", same,
              lg.size());
  EXPECT_EQ(same, lg.size());
}

TEST(CudaInvariance, PrefillChunkingDoesNotChangeLogits) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  const auto p = prompt(5, 100, b->gpu->vocab_size());
  auto s1 = b->gpu->create_sequence();
  auto whole = b->gpu->prefill(s1, p, runtime::LogitsMode::kAll);
  ASSERT_TRUE(whole.ok()) << whole.message();
  auto s2 = b->gpu->create_sequence();
  std::vector<float> by_token;
  for (int32_t t : p) {
    auto l = b->gpu->prefill(s2, std::span<const int32_t>(&t, 1), runtime::LogitsMode::kAll);
    ASSERT_TRUE(l.ok()) << l.message();
    by_token.insert(by_token.end(), l->begin(), l->end());
  }
  ASSERT_EQ(whole->size(), by_token.size());
  EXPECT_EQ(std::memcmp(whole->data(), by_token.data(), by_token.size() * 4), 0)
      << "a prompt in 16-row steps vs one token per step";
}

// Row 0 of every tiled GEMV format at M = 1..16 is bit-identical (the work split depends on the matrix only).
TEST(CudaInvariance, TiledGemvRow0SameAtEveryM) {
  REQUIRE_GPU();
  Rng r(11);
  auto ws = WorkspaceBuffers::create();
  ASSERT_TRUE(ws.ok()) << ws.message();
  const int rows = 1024, in = 2048;
  std::vector<uint16_t> wb(static_cast<size_t>(rows) * in);
  for (auto& v : wb) v = r.bf16(0.05f);
  std::vector<uint8_t> w8(static_cast<size_t>(rows) * in);
  for (auto& v : w8) v = static_cast<uint8_t>(r.uniform_int(0, 255) & 0xF7);  // no NaN codes
  std::vector<float> sc(static_cast<size_t>(rows), 0.01f);
  auto cbm = make_cb_matrix(16, 2, rows, in, r);
  auto bf = upload_bf16(rows, in, 1, wb);
  auto f8 = upload_fp8(rows, in, 1, w8, sc);
  auto cb = upload_cb(16, 2, rows, in, 1, cbm.canonical, cbm.cb_f16, gridbook::kV2Table);
  ASSERT_TRUE(bf.ok() && f8.ok() && cb.ok());
  std::vector<uint16_t> x(16 * static_cast<size_t>(in));
  for (auto& v : x) v = r.bf16(1.0f);
  std::vector<uint8_t> xq(16 * static_cast<size_t>(in));
  for (auto& v : xq) v = static_cast<uint8_t>(r.uniform_int(0, 255) & 0xF7);
  std::vector<float> xs(16, 0.02f);
  auto dx = DeviceBuffer::alloc(x.size() * 2, "x");
  auto dq = DeviceBuffer::alloc(xq.size(), "xq");
  auto ds = DeviceBuffer::alloc(64, "xs");
  auto dy = DeviceBuffer::alloc(16 * static_cast<size_t>(rows) * 4, "y");
  ASSERT_TRUE(dx.ok() && dq.ok() && ds.ok() && dy.ok());
  ASSERT_TRUE(dx->upload(x.data(), x.size() * 2).ok());
  ASSERT_TRUE(dq->upload(xq.data(), xq.size()).ok());
  ASSERT_TRUE(ds->upload(xs.data(), 64).ok());
  for (const DeviceWeights* d : {&*bf, &*f8, &*cb}) {
    std::vector<float> row0, cur(static_cast<size_t>(rows));
    for (int M = 1; M <= 16; ++M) {
      GemvArgs a;
      a.w = &d->m;
      a.M = M;
      a.x = d->m.format == WeightFormat::FP8 ? dq->as() : dx->as();
      a.xscale = ds->as<float>();
      a.y = dy->as();
      a.out = OutType::F32;
      ASSERT_TRUE(gemv(a, ws->ws, nullptr, false).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_TRUE(dy->download(cur.data(), cur.size() * 4).ok());
      if (M == 1) row0 = cur;
      EXPECT_EQ(std::memcmp(row0.data(), cur.data(), cur.size() * 4), 0)
          << "format " << static_cast<int>(d->m.format) << " row 0 at M=" << M << " differs from M=1";
    }
  }
}

}  // namespace
}  // namespace gridq::cuda::test

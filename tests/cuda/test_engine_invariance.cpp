// Batch invariance on the GPU (gpu-engine.md §3): a row's logits depend only on its own sequence. Checked
// bit for bit: every row of every tiled GEMV / GEMM (and fused SwiGLU) at M = 1…2048 vs the row alone; greedy
// 128-token generations run to run and alone vs among 15 and 63 others (with their logits); a prompt
// prefilled in one call vs token by token and in chunks of 7. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "engine_test_util.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/sampler.h"

namespace gridq::cuda::test {
namespace {

using testing::repo_path;

std::vector<int32_t> prompt(int seed, int n, int vocab) { return random_prompt(seed, n, vocab); }

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

TEST(CudaInvariance, GreedyAloneVsBesideSixtyThreeOthersAndRunToRun) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false, 64);
  ASSERT_TRUE(b.ok()) << b.message();
  const int V = b->gpu->vocab_size();
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 64; ++i) ps.push_back(prompt(100 + i, 20 + 7 * (i % 16) + i, V));
  std::vector<std::vector<float>> l_alone, l_alone2, l_batch, l_batch16;
  auto alone = greedy(*b->gpu, {ps[0]}, 128, &l_alone);
  auto alone2 = greedy(*b->gpu, {ps[0]}, 128, &l_alone2);
  auto batch = greedy(*b->gpu, ps, 128, &l_batch);
  auto batch16 =
      greedy(*b->gpu, std::vector<std::vector<int32_t>>(ps.begin(), ps.begin() + 16), 128, &l_batch16);
  EXPECT_EQ(alone[0], alone2[0]) << "greedy run to run";
  EXPECT_EQ(alone[0], batch[0]) << "greedy alone vs beside 63 others";
  EXPECT_EQ(alone[0], batch16[0]) << "greedy alone vs beside 15 others";
  size_t same = 0, same16 = 0;
  for (size_t s = 0; s < l_alone.size() && s < l_batch.size(); ++s)
    same += std::memcmp(l_alone[s].data(), l_batch[s].data(), l_alone[s].size() * 4) == 0;
  for (size_t s = 0; s < l_alone.size() && s < l_batch16.size(); ++s)
    same16 += std::memcmp(l_alone[s].data(), l_batch16[s].data(), l_alone[s].size() * 4) == 0;
  std::printf(
      "[gpu invariance] greedy 128 tokens: alone == beside 63 others: %s; logits bit-identical at %zu/%zu "
      "steps (beside 15: %zu/%zu)\n",
      alone[0] == batch[0] ? "yes" : "no", same, l_alone.size(), same16, l_alone.size());
  EXPECT_EQ(same, l_alone.size()) << "decode logits of row 0 alone vs in a 64-row step";
  EXPECT_EQ(same16, l_alone.size()) << "decode logits of row 0 alone vs in a 16-row step";
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

// The L2 prefetches (forward_kernels.h kL2Ahead*) are hints on a stream of their own: every mask gives the
// bits of none, eager and replayed.
TEST(CudaInvariance, L2PrefetchMasksKeepTheBits) {
  REQUIRE_GPU();
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 3; ++i) ps.push_back(prompt(500 + i, 25 + 9 * i, 4096));
  std::vector<std::vector<float>> want;
  for (int mask : {0, detail::kL2AheadAll, detail::kL2AheadAuto}) {
    detail::set_forward_l2_ahead(mask);
    auto b = open_both(repo_path("models/laguna-tiny-code"), false, 16, true);
    ASSERT_TRUE(b.ok()) << b.message();
    std::vector<std::vector<float>> got;
    greedy(*b->gpu, ps, 24, &got);
    if (want.empty()) want = got;
    EXPECT_EQ(got, want) << "decode logits under --l2-ahead " << mask;
  }
  detail::set_forward_l2_ahead(detail::kL2AheadAuto);
}

TEST(CudaInvariance, PrefillChunkingDoesNotChangeLogits) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  const auto p = prompt(5, 150, b->gpu->vocab_size());
  auto s1 = b->gpu->create_sequence();
  auto whole = b->gpu->prefill(s1, p, runtime::LogitsMode::kAll);
  ASSERT_TRUE(whole.ok()) << whole.message();
  // The same prompt one token per call, and in chunks of 7 (steps that cut it at other places).
  for (size_t chunk : {size_t{1}, size_t{7}}) {
    auto s2 = b->gpu->create_sequence();
    std::vector<float> pieces;
    for (size_t i = 0; i < p.size(); i += chunk) {
      const size_t n = std::min(chunk, p.size() - i);
      auto l = b->gpu->prefill(s2, std::span<const int32_t>(p.data() + i, n), runtime::LogitsMode::kAll);
      ASSERT_TRUE(l.ok()) << l.message();
      pieces.insert(pieces.end(), l->begin(), l->end());
    }
    ASSERT_EQ(whole->size(), pieces.size());
    EXPECT_EQ(std::memcmp(whole->data(), pieces.data(), pieces.size() * 4), 0)
        << "a prompt in one step vs chunks of " << chunk;
    b->gpu->free_sequence(s2);
  }
}

// A long prompt asking only for its last logits runs as steps of many rows (attention in several slices,
// each with its own split count): its last logits and the KV it leaves (the next steps' logits) are the
// same bits as the prompt fed in chunks of 7 and 64.
TEST(CudaInvariance, LongPrefillStepsMatchChunks) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  const auto p = prompt(6, 700, b->gpu->vocab_size());
  auto run = [&](size_t chunk) {
    std::vector<float> out;
    auto s = b->gpu->create_sequence();
    for (size_t i = 0; i < p.size(); i += chunk) {
      const size_t n = std::min(chunk, p.size() - i);
      const bool last = i + n == p.size();
      auto l = b->gpu->prefill(s, std::span<const int32_t>(p.data() + i, n),
                               last ? runtime::LogitsMode::kLast : runtime::LogitsMode::kNone);
      EXPECT_TRUE(l.ok()) << l.message();
      if (!l.ok()) return out;
      if (last) out = *l;
    }
    for (int step = 0; step < 6; ++step) {  // decode on the KV the prompt left
      const int32_t tok = static_cast<int32_t>(std::max_element(out.end() - b->gpu->vocab_size(), out.end()) -
                                               (out.end() - b->gpu->vocab_size()));
      auto l = b->gpu->prefill(s, std::span<const int32_t>(&tok, 1), runtime::LogitsMode::kLast);
      EXPECT_TRUE(l.ok()) << l.message();
      if (!l.ok()) return out;
      out.insert(out.end(), l->begin(), l->end());
    }
    b->gpu->free_sequence(s);
    return out;
  };
  const auto whole = run(p.size());
  ASSERT_EQ(whole.size(), 7u * static_cast<size_t>(b->gpu->vocab_size()));
  for (size_t chunk : {size_t{7}, size_t{64}}) {
    const auto pieces = run(chunk);
    ASSERT_EQ(whole.size(), pieces.size());
    EXPECT_EQ(std::memcmp(whole.data(), pieces.data(), pieces.size() * 4), 0)
        << "a 700-token prompt in one call vs chunks of " << chunk;
  }
}

// Every row of every tiled format's GEMV (M ≤ 16) and GEMM (M > 16, token blocks of 64 and 32) at each M of
// `Ms` has the bits of the same row computed alone (M = 1): the work split depends on the matrix only. With
// `accumulate` the F32 output adds onto a residual (the fused residual add of o_proj and the MLP down).
// `expect_split`: some M of `Ms` must run the GEMM split over K (gemm_impl.cuh), in every format
// (`expect_split_bf16`: in BF16).
void check_tiled_rows(int rows, int in, const std::vector<int>& Ms, bool accumulate, uint64_t seed,
                      bool expect_split = false, bool expect_split_bf16 = false) {
  Rng r(seed);
  auto ws = WorkspaceBuffers::create();
  ASSERT_TRUE(ws.ok()) << ws.message();
  const int Mmax = *std::max_element(Ms.begin(), Ms.end());
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
  std::vector<uint16_t> x(static_cast<size_t>(Mmax) * in);
  for (auto& v : x) v = r.bf16(1.0f);
  std::vector<uint8_t> xq(static_cast<size_t>(Mmax) * in);
  for (auto& v : xq) v = static_cast<uint8_t>(r.uniform_int(0, 255) & 0xF7);
  std::vector<float> xs(static_cast<size_t>(Mmax)), res(static_cast<size_t>(Mmax) * rows);
  for (auto& v : xs) v = r.uniform(0.01f, 0.03f);
  for (auto& v : res) v = r.uniform(-4.0f, 4.0f);
  auto dx = DeviceBuffer::alloc(x.size() * 2, "x");
  auto dq = DeviceBuffer::alloc(xq.size(), "xq");
  auto ds = DeviceBuffer::alloc(xs.size() * 4, "xs");
  auto dy = DeviceBuffer::alloc(static_cast<size_t>(Mmax) * rows * 4, "y");
  ASSERT_TRUE(dx.ok() && dq.ok() && ds.ok() && dy.ok());
  ASSERT_TRUE(dx->upload(x.data(), x.size() * 2).ok());
  ASSERT_TRUE(dq->upload(xq.data(), xq.size()).ok());
  ASSERT_TRUE(ds->upload(xs.data(), xs.size() * 4).ok());
  for (const DeviceWeights* d : {&*bf, &*f8, &*cb}) {
    const bool fp8 = d->m.format == WeightFormat::FP8;
    const size_t xb = fp8 ? 1 : 2, yn = static_cast<size_t>(rows);
    int max_parts = 0;
    auto run = [&](int M, int first, std::vector<float>& out) {
      if (accumulate) {
        ASSERT_TRUE(dy->upload(res.data() + static_cast<size_t>(first) * yn, M * yn * 4).ok());
      }
      GemvArgs a;
      a.w = &d->m;
      a.M = M;
      a.x = (fp8 ? dq->as<uint8_t>() : dx->as<uint8_t>()) + static_cast<size_t>(first) * in * xb;
      a.xscale = ds->as<float>() + first;
      a.y = dy->as();
      a.out = OutType::F32;
      a.accumulate = accumulate;
      ASSERT_TRUE(gemv(a, ws->ws, nullptr, false).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (M > kMaxTokens) max_parts = std::max(max_parts, gemm_split_parts(d->m, M));
      out.resize(static_cast<size_t>(M) * yn);
      ASSERT_TRUE(dy->download(out.data(), out.size() * 4).ok());
    };
    std::vector<std::vector<float>> alone(static_cast<size_t>(Mmax));
    for (int m = 0; m < Mmax; ++m) run(1, m, alone[static_cast<size_t>(m)]);
    int bad = 0;
    for (int M : Ms) {
      std::vector<float> cur;
      run(M, 0, cur);
      for (int m = 0; m < M; ++m)
        bad += std::memcmp(alone[static_cast<size_t>(m)].data(), cur.data() + static_cast<size_t>(m) * yn,
                           yn * 4) != 0;
    }
    std::printf(
        "[gpu invariance] format %d, %d x %d%s: rows differing from the row alone: %d (GEMM K-parts %d)\n",
        static_cast<int>(d->m.format), rows, in, accumulate ? " (+= residual)" : "", bad, max_parts);
    EXPECT_EQ(bad, 0) << "format " << static_cast<int>(d->m.format) << ", " << rows << " x " << in;
    if (expect_split || (expect_split_bf16 && d->m.format == WeightFormat::BF16)) {
      EXPECT_GT(max_parts, 1) << "format " << static_cast<int>(d->m.format) << ": no split-K GEMM ran";
    }
  }
}

// 65 tiles: the last CTA of the GEMM has one active warp.
TEST(CudaInvariance, TiledRowsSameAtEveryM) {
  REQUIRE_GPU();
  check_tiled_rows(1040, 2048, {2, 7, 8, 9, 16, 17, 31, 64, 65, 130, 200}, false, 11);
}

// A prefill step's shapes: o_proj's K (9216 = 144 units of 64), a 2048-row step, the residual add fused.
TEST(CudaInvariance, TiledRowsSameAtPrefillShapes) {
  REQUIRE_GPU();
  check_tiled_rows(1040, 9216, {300, 2048}, true, 13);
}

// A decode batch past 16 rows: o_proj's shape (192 tiles, K 9216), whose GEMV ranges are tile-aligned, so
// the GEMM splits K over CTAs at one to three token blocks; 130 rows also leave a partial last block.
TEST(CudaInvariance, TiledRowsSameSplitOverK) {
  REQUIRE_GPU();
  check_tiled_rows(3072, 9216, {17, 64, 65, 130, 192}, true, 17, true);
  // A per-head gate's shape (g_proj: 72 rows, padded to 80 = 5 tiles): one tile group, split over K in BF16.
  check_tiled_rows(80, 3072, {17, 64}, false, 19, false, true);
}

// The fused gate+up+SiLU·mul (+FP4 QDQ): every row of M = 17 .. 130 (GEMM, 32-row blocks) equals the row
// alone.
TEST(CudaInvariance, SwigluRowsSameAtEveryM) {
  REQUIRE_GPU();
  Rng r(12);
  auto ws = WorkspaceBuffers::create();
  ASSERT_TRUE(ws.ok()) << ws.message();
  const int I = 528, H = 1024, Mmax = 130;
  std::vector<uint16_t> wb(static_cast<size_t>(2 * I) * H);
  for (auto& v : wb) v = r.bf16(0.05f);
  auto cbm = make_cb_matrix(16, 2, 2 * I, H, r);
  auto bf = upload_bf16(2 * I, H, 1, wb);
  auto cb = upload_cb(16, 2, 2 * I, H, 1, cbm.canonical, cbm.cb_f16, gridbook::kV2Table);
  ASSERT_TRUE(bf.ok() && cb.ok());
  std::vector<uint16_t> x(static_cast<size_t>(Mmax) * H);
  for (auto& v : x) v = r.bf16(1.0f);
  auto dx = DeviceBuffer::alloc(x.size() * 2, "x");
  auto dh = DeviceBuffer::alloc(static_cast<size_t>(Mmax) * I * 2, "h");
  ASSERT_TRUE(dx.ok() && dh.ok());
  ASSERT_TRUE(dx->upload(x.data(), x.size() * 2).ok());
  for (const DeviceWeights* d : {&*bf, &*cb})
    for (bool qdq : {false, true}) {
      auto run = [&](int M, int first, std::vector<uint16_t>& out) {
        ASSERT_TRUE(gemv_swiglu(d->m, M, dx->as<uint16_t>() + static_cast<size_t>(first) * H,
                                dh->as<uint16_t>(), qdq, ws->ws, nullptr, false)
                        .ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        out.resize(static_cast<size_t>(M) * I);
        ASSERT_TRUE(dh->download(out.data(), out.size() * 2).ok());
      };
      std::vector<std::vector<uint16_t>> alone(static_cast<size_t>(Mmax));
      for (int m = 0; m < Mmax; ++m) run(1, m, alone[static_cast<size_t>(m)]);
      int bad = 0;
      for (int M : {17, 32, 33, 130}) {
        std::vector<uint16_t> cur;
        run(M, 0, cur);
        for (int m = 0; m < M; ++m)
          bad += std::memcmp(alone[static_cast<size_t>(m)].data(), cur.data() + static_cast<size_t>(m) * I,
                             static_cast<size_t>(I) * 2) != 0;
      }
      std::printf("[gpu invariance] swiglu format %d qdq %d: rows differing from the row alone: %d\n",
                  static_cast<int>(d->m.format), qdq ? 1 : 0, bad);
      EXPECT_EQ(bad, 0);
    }
}

}  // namespace
}  // namespace gridq::cuda::test

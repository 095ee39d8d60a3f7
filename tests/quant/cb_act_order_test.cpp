// Group-wise act order (cb_act_order.h): the order is a permutation of whole 16-column groups that keeps each
// superblock's groups together; with the identity order it is plain CB-GPTQ byte for byte; the permuted-back
// encoding packs and decodes to its w_hat (codewords in column order); the same bytes at any thread count;
// under `--device cuda` the GPU encoder gets the permuted problem (a fake device here, answering with the CPU
// encoder; tests/cuda/test_cb_gptq.cpp holds the real one to the CPU's bytes).
#include "quant/cb_act_order.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "pipeline_test_util.h"
#include "quant/cb_refine.h"
#include "quant/encode_tensor.h"
#include "quant/lattice_codebook.h"
#include "quant/output_proxy.h"
#include "quant_test_util.h"
#include "runtime/device.h"

namespace gridq::quant {
namespace {

using testing::k16;

TEST(CbActOrder, OrderKeepsSuperblocksTogether) {
  std::vector<float> diag(768);
  for (int j = 0; j < 768; ++j) diag[j] = static_cast<float>((j * 37) % 101) + (j >= 512 ? 500.0f : 0.0f);
  const std::vector<int> perm = act_order_groups(diag.data(), 768);
  ASSERT_EQ(perm.size(), 48u);
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 48; ++i) EXPECT_EQ(sorted[i], i);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(perm[i] / 16, perm[i - i % 16] / 16);  // one superblock per 16
  EXPECT_EQ(perm[0] / 16, 2);  // the heaviest superblock first
}

TEST(CbActOrder, IdentityOrderIsPlainCbGptqAndDecodesExactly) {
  const gridbook::Codebook cb = k16();
  const int R = 32, C = 512;
  const int64_t n = 1024;
  testing::Correlated cor(C, 11);
  const std::vector<float> X = cor.rows(n, 12);
  std::vector<float> H = testing::gram(X, n, C);
  const std::vector<float> W = testing::gaussian(size_t(R) * C, 13, 0.02);
  std::vector<float> q(C);
  for (int j = 0; j < C; ++j) q[j] = H[size_t(j) * C + j] / static_cast<float>(n);
  auto plain = encode_fp4_cb_gptq(cb, W.data(), R, C, H.data(), n, q.data());
  ASSERT_TRUE(plain.ok()) << plain.message();

  // A diagonal boost that makes column order the descending order: act order must then change nothing.
  std::vector<float> Hs = H;
  for (int j = 0; j < C; ++j) Hs[size_t(j) * C + j] += 1e4f * static_cast<float>(C - j);
  auto a = encode_fp4_cb_gptq_act_order(cb, W.data(), R, C, Hs.data(), n, q.data());
  auto b = encode_fp4_cb_gptq(cb, W.data(), R, C, Hs.data(), n, q.data());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*pack_fp4_v2(cb.rung, *a), *pack_fp4_v2(cb.rung, *b));

  // A real reorder: the encoding decodes to its w_hat, and the error is reported next to plain CB-GPTQ.
  const int saved = omp_get_max_threads();
  std::vector<std::vector<uint8_t>> bytes;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    auto e = encode_fp4_cb_gptq_act_order(cb, W.data(), R, C, H.data(), n, q.data());
    ASSERT_TRUE(e.ok()) << e.message();
    bytes.push_back(*pack_fp4_v2(cb.rung, *e));
    if (threads == 1) {
      const int64_t rb = gridbook::row_bytes(cb.rung, C);
      std::vector<uint16_t> out(C);
      int mismatches = 0;
      for (int r = 0; r < R; ++r) {
        gridbook::decode_row(cb.rung, cb, bytes.back().data() + r * rb, C, 0.0f, out.data());
        for (int j = 0; j < C; ++j)
          if (out[j] != f32_to_bf16(e->w_hat[size_t(r) * C + j])) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0);
      std::printf("H-weighted error: plain %.6g, act order %.6g\n",
                  h_weighted_error(W.data(), plain->w_hat.data(), H.data(), R, C, 0.1),
                  h_weighted_error(W.data(), e->w_hat.data(), H.data(), R, C, 0.1));
    }
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(bytes[0], bytes[1]);
}

// encode_tensor with act order under --device cuda: CB-GPTQ runs through the device hook on the permuted
// problem (its Hessian in processing order), the refinement on the host; the bytes, Ŵ and record are the CPU
// path's.
TEST(CbActOrder, DeviceEncodeGetsThePermutedProblem) {
  const gridbook::Codebook cb = k16();
  const DenseBook book = DenseBook::from(cb);
  const int R = 16, C = 512;
  const InputStats in = testing::synthetic_stats("layers.1.mlp.experts.0.in", C, 600, 40, 5);
  const testing::Bf16Src src("model.layers.1.mlp.experts.0.up_proj.weight", R, C, 6);
  const SourceWeight& sw = src.sw;
  EncodeParams p{"NVFP4_CB_K16", "cb_gptq", {}, {}};
  p.cb_gptq.act_order = true;
  p.cb_gptq.refine_passes = 2;
  auto cpu = encode_tensor(sw, &in, p, &cb);
  ASSERT_TRUE(cpu.ok()) << cpu.message();

  int gptq_calls = 0, permuted = 0;
  testing::FakeCudaHooks fake;
  fake.h.cb_fp4 = [&](const runtime::CbFp4Request& r) -> Expected<runtime::CbFp4Reply> {
    const CbGptqOptions o = testing::options_of(r.s);
    auto e = r.H ? encode_fp4_cb_gptq(cb, r.W, r.R, r.C, r.H, r.n_tokens, r.q, o)
                 : encode_fp4_rtn(cb, r.W, r.R, r.C, r.q, o.two_tier);
    if (!e.ok()) return err("{}", e.message());
    if (r.H) {
      ++gptq_calls;
      EXPECT_EQ(r.s.refine_passes, 0);  // act order refines on the host, after the permutation back
      for (int j = 0; j < r.C; ++j) permuted += r.H[size_t(j) * r.C + j] != in.H[size_t(j) * C + j];
    }
    return testing::reply_of(book, *e);
  };
  fake.h.half_trace = [](const float* Wa, const float* Wh, int Ra, int Ca, const float* Ha) {
    return output_half_trace(Wa, Wh, Ra, Ca, Ha);
  };
  fake.install();
  p.device_encode = true;
  auto dev = encode_tensor(sw, &in, p, &cb);
  ASSERT_TRUE(dev.ok()) << dev.message();
  EXPECT_EQ(gptq_calls, 1);
  EXPECT_GT(permuted, 0);  // the device saw H in processing order, not column order
  EXPECT_TRUE(cpu->data == dev->data);
  EXPECT_TRUE(cpu->w_hat == dev->w_hat);
  EXPECT_EQ(cpu->stats.to_json().dump(), dev->stats.to_json().dump());
  EXPECT_FALSE(cpu->stats.refine.is_null());  // the refinement ran (on the host, both times)
}

}  // namespace
}  // namespace gridq::quant

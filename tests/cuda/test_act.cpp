// Activation kernels bit-exact against the CPU contracts (core/act_qdq.h), RMSNorm against a float64
// reference, the router against a CPU top-k.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/act_qdq.h"
#include "cuda_test_util.h"

namespace gridq::cuda::test {
namespace {

std::vector<uint16_t> tricky_row(int K, Rng& r) {
  std::vector<uint16_t> x(static_cast<size_t>(K));
  for (auto& v : x) v = r.bf16(r.uniform(0.01f, 50.0f));
  // Special groups: all zero, -0s, exact grid ties at amax 6, a NaN group, tiny values.
  for (int j = 0; j < 16 && 16 + j < K; ++j) x[static_cast<size_t>(j)] = 0;
  for (int j = 0; j < 16 && 32 + j < K; ++j) x[static_cast<size_t>(16 + j)] = 0x8000;
  const float ties[16] = {6,  0.25f, -0.25f, 0.75f, -0.75f, 2.5f,  -2.5f,  5,
                          -5, 1,     3.5f,   -3.5f, 0,      1.25f, -1.75f, 4.5f};
  for (int j = 0; j < 16 && 48 + j < K; ++j) x[static_cast<size_t>(32 + j)] = f32_to_bf16(ties[j]);
  for (int j = 0; j < 16 && 64 + j < K; ++j)
    x[static_cast<size_t>(48 + j)] = f32_to_bf16(1e-20f * static_cast<float>(j));
  return x;
}

TEST(CudaAct, Fp4QdqBitExact) {
  REQUIRE_GPU();
  Rng r(600);
  const int M = 5, K = 3072;
  std::vector<uint16_t> x;
  for (int m = 0; m < M; ++m) {
    auto row = tricky_row(K, r);
    if (m == 2) row[100] = 0x7FC0;  // NaN poisons only its group
    x.insert(x.end(), row.begin(), row.end());
  }
  auto xd = upload_vec(x, "x");
  auto yd = DeviceBuffer::alloc(x.size() * 2, "y");
  ASSERT_TRUE(yd.ok());
  poison(*yd);
  ASSERT_OK(qdq_fp4(xd.as<uint16_t>(), M, K, yd->as<uint16_t>(), nullptr, false));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto y = download<uint16_t>(*yd, x.size());
  std::vector<uint16_t> ref(x.size());
  ASSERT_OK(qdq_fp4_row(x, ref));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], ref[i]) << "element " << i << " x=" << x[i];
  EXPECT_FALSE(qdq_fp4(xd.as<uint16_t>(), 1, 30, yd->as<uint16_t>(), nullptr, false).ok());  // K % 16
}

TEST(CudaAct, RmsNormWithFusedContracts) {
  REQUIRE_GPU();
  Rng r(700);
  const int M = 3, H = 3072;
  std::vector<uint16_t> x(static_cast<size_t>(M) * H), w(static_cast<size_t>(H));
  for (auto& v : x) v = r.bf16(3.0f);
  for (auto& v : w) v = r.bf16(2.0f);
  auto xd = upload_vec(x, "x");
  auto wd = upload_vec(w, "w");
  auto y = DeviceBuffer::alloc(x.size() * 2, "y");
  auto y4 = DeviceBuffer::alloc(x.size() * 2, "y4");
  auto yq = DeviceBuffer::alloc(x.size(), "yq");
  auto ys = DeviceBuffer::alloc(static_cast<size_t>(M) * 4, "ys");
  ASSERT_TRUE(y.ok() && y4.ok() && yq.ok() && ys.ok());
  poison(*y), poison(*y4), poison(*yq), poison(*ys);
  RmsNormArgs a;
  a.x = xd.as<uint16_t>();
  a.w = wd.as<uint16_t>();
  a.M = M;
  a.H = H;
  a.y = y->as<uint16_t>();
  a.y_fp4 = y4->as<uint16_t>();
  a.y_q = yq->as<uint8_t>();
  a.y_s = ys->as<float>();
  ASSERT_OK(rmsnorm(a, nullptr, false));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto yh = download<uint16_t>(*y, x.size());
  auto y4h = download<uint16_t>(*y4, x.size());
  auto yqh = download<uint8_t>(*yq, x.size());
  auto ysh = download<float>(*ys, static_cast<size_t>(M));
  for (int m = 0; m < M; ++m) {
    double ss = 0;
    for (int k = 0; k < H; ++k) ss += std::pow(bf16_to_f32(x[static_cast<size_t>(m) * H + k]), 2);
    const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
    for (int k = 0; k < H; ++k) {
      const size_t i = static_cast<size_t>(m) * H + k;
      const double ref = bf16_to_f32(w[static_cast<size_t>(k)]) * (bf16_to_f32(x[i]) * inv);
      ASSERT_NEAR(bf16_to_f32(yh[i]), ref, std::fabs(ref) * (1.0 / 128) + 1e-30) << "m " << m << " k " << k;
    }
    // The fused contracts are exactly the contracts applied to the written y.
    auto row = std::span<const uint16_t>(yh).subspan(static_cast<size_t>(m) * H, H);
    std::vector<uint16_t> r4(static_cast<size_t>(H));
    ASSERT_OK(qdq_fp4_row(row, r4));
    std::vector<uint8_t> rq(static_cast<size_t>(H));
    const float s = quantize_fp8_token_row(row, rq);
    EXPECT_EQ(std::bit_cast<uint32_t>(s), std::bit_cast<uint32_t>(ysh[static_cast<size_t>(m)]));
    for (int k = 0; k < H; ++k) {
      const size_t i = static_cast<size_t>(m) * H + k;
      ASSERT_EQ(y4h[i], r4[static_cast<size_t>(k)]) << "fp4 m " << m << " k " << k;
      ASSERT_EQ(yqh[i], rq[static_cast<size_t>(k)]) << "fp8 m " << m << " k " << k;
    }
  }
}

TEST(CudaAct, RouterTopkMatchesCpu) {
  REQUIRE_GPU();
  Rng r(800);
  const int M = 4, E = 256, topk = 10;
  std::vector<float> logits(static_cast<size_t>(M) * E), bias(static_cast<size_t>(E));
  for (auto& v : logits) v = r.uniform(-4.0f, 4.0f);
  for (auto& v : bias) v = r.uniform(-0.05f, 0.05f);
  // Tokens 0 and 1 share their logits, so some experts are shared between tokens.
  std::copy(logits.begin(), logits.begin() + E, logits.begin() + E);
  auto ld = upload_vec(logits, "logits");
  auto bd = upload_vec(bias, "bias");
  auto ns = DeviceBuffer::alloc(4, "nslots");
  auto se = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * 4, "slot_expert");
  auto sw = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * M * 4, "slot_weight");
  auto ti = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * 4, "ids");
  auto tw = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * 4, "w");
  ASSERT_TRUE(ns.ok() && se.ok() && sw.ok() && ti.ok() && tw.ok());
  RouteArgs a;
  a.logits = ld.as<float>();
  a.bias = bd.as<float>();
  a.M = M;
  a.E = E;
  a.topk = topk;
  a.nslots = ns->as<int>();
  a.slot_expert = se->as<int>();
  a.slot_weight = sw->as<float>();
  a.topk_ids = ti->as<int>();
  a.topk_w = tw->as<float>();
  ASSERT_OK(route(a, nullptr, false));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto ids = download<int>(*ti, static_cast<size_t>(M) * topk);
  auto wts = download<float>(*tw, static_cast<size_t>(M) * topk);
  const int n = download<int>(*ns, 1)[0];
  auto sexp = download<int>(*se, static_cast<size_t>(n));
  auto sww = download<float>(*sw, static_cast<size_t>(n) * M);
  std::vector<int> all;
  for (int m = 0; m < M; ++m) {
    std::vector<double> s(E), key(E);
    for (int e = 0; e < E; ++e) {
      s[static_cast<size_t>(e)] =
          1.0 / (1.0 + std::exp(-static_cast<double>(logits[static_cast<size_t>(m) * E + e])));
      key[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + bias[static_cast<size_t>(e)];
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a1, int b1) {
      return key[static_cast<size_t>(a1)] > key[static_cast<size_t>(b1)];
    });
    double sum = 0;
    for (int j = 0; j < topk; ++j) sum += s[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int j = 0; j < topk; ++j) {
      const int e = order[static_cast<size_t>(j)];
      EXPECT_EQ(ids[static_cast<size_t>(m) * topk + j], e) << "token " << m << " rank " << j;
      EXPECT_NEAR(wts[static_cast<size_t>(m) * topk + j], s[static_cast<size_t>(e)] / sum, 1e-6);
      all.push_back(e);
      const auto it = std::find(sexp.begin(), sexp.end(), e);
      ASSERT_NE(it, sexp.end());
      EXPECT_NEAR(sww[static_cast<size_t>(it - sexp.begin()) * M + m], s[static_cast<size_t>(e)] / sum, 1e-6);
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(static_cast<size_t>(n), all.size());
  EXPECT_EQ(sexp, all);
}

}  // namespace
}  // namespace gridq::cuda::test

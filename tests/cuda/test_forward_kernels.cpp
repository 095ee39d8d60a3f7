// The forward's row kernels against the CPU reference: the router's choices exactly (runtime/router.cpp,
// sigmoid and softmax, with exact ties; weights to the device expf's last ulp), and RMSNorm of FP32 rows with
// its fused contract copies bit for bit what core/act_qdq.h makes of the BF16 rows it writes; the output
// gate with o_proj's FP8 contract fused, bit for bit the gate then quantize_fp8.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include "core/act_qdq.h"
#include "cuda_test_util.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/router.h"

namespace gridq::cuda::test {
namespace {

void check_router(int T, int E, int k, bool softmax, bool with_bias, uint64_t salt) {
  Rng r(salt);
  std::vector<float> z(static_cast<size_t>(T) * E), bias(static_cast<size_t>(E));
  for (auto& v : z) v = r.uniform(-4.0f, 4.0f);
  for (auto& v : bias) v = r.uniform(-0.05f, 0.05f);
  // Exact ties: a run of equal logits in row 0 (the lower id must win), row 1 a copy of row 0.
  for (int e = 0; e < 12 && e < E; ++e) z[static_cast<size_t>(3 * e % E)] = 3.5f;
  if (T > 1) std::copy(z.begin(), z.begin() + E, z.begin() + E);
  if (with_bias)
    for (int e = 0; e < 12 && e < E; ++e) bias[static_cast<size_t>(3 * e % E)] = 0.0f;
  auto zd = upload_vec(z, "z");
  auto bd = upload_vec(bias, "bias");
  auto ids = DeviceBuffer::alloc(static_cast<size_t>(T) * k * 4, "ids");
  auto w = DeviceBuffer::alloc(static_cast<size_t>(T) * k * 4, "w");
  ASSERT_TRUE(ids.ok() && w.ok());
  ASSERT_EQ(detail::raw_route_tokens(zd.as<float>(), E, with_bias ? bd.as<float>() : nullptr, T, E, k,
                                     softmax ? 1 : 0, 1, ids->as<int>(), w->as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto gi = download<int>(*ids, static_cast<size_t>(T) * k);
  const auto gw = download<float>(*w, static_cast<size_t>(T) * k);
  for (int t = 0; t < T; ++t) {
    std::vector<int> ri(static_cast<size_t>(k));
    std::vector<float> rw(static_cast<size_t>(k));
    runtime::route_token(z.data() + static_cast<size_t>(t) * E, E, with_bias ? bias.data() : nullptr, k,
                         softmax ? model::RouterScore::kSoftmax : model::RouterScore::kSigmoid, true,
                         ri.data(), rw.data());
    // The device sorts a row's experts by id (the experts' accumulation order); the pairs must match.
    std::vector<int> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ri[size_t(a)] < ri[size_t(b)]; });
    for (int j = 0; j < k; ++j) {
      const size_t o = static_cast<size_t>(order[static_cast<size_t>(j)]), g = static_cast<size_t>(t) * k + j;
      ASSERT_EQ(gi[g], ri[o]) << "row " << t << " choice " << j << (softmax ? " softmax" : " sigmoid");
      // expf may differ from the host's in the last ulp; the selection and its order may not.
      ASSERT_NEAR(gw[g], rw[o], 2e-6f * rw[o]) << "row " << t << " expert " << ri[o];
    }
  }
}

TEST(CudaForwardKernels, RouterEqualsCpuBitForBit) {
  REQUIRE_GPU();
  check_router(5, 256, 10, false, true, 41);    // Laguna: sigmoid + correction bias
  check_router(3, 128, 8, true, false, 42);     // Qwen3-MoE: softmax
  check_router(2, 12, 4, false, false, 43);     // the bundled model's shape
  check_router(64, 1000, 32, false, true, 44);  // the limits of one block
}

TEST(CudaForwardKernels, RmsNormF32ContractsAreTheContractsOfItsOutput) {
  REQUIRE_GPU();
  Rng r(900);
  for (const int H : {3072, 512, 16384}) {
    const int T = 5;
    std::vector<float> x(static_cast<size_t>(T) * H), w(static_cast<size_t>(H));
    for (auto& v : x) v = r.uniform(-3.0f, 3.0f);
    for (auto& v : w) v = r.uniform(0.2f, 2.0f);
    for (int i = 0; i < 16; ++i) x[static_cast<size_t>(H + i)] = 0.0f;  // row 1 has an all-zero group
    auto xd = upload_vec(x, "x");
    auto wd = upload_vec(w, "w");
    auto y = DeviceBuffer::alloc(x.size() * 2, "y"), y32 = DeviceBuffer::alloc(x.size() * 4, "y32");
    auto y4 = DeviceBuffer::alloc(x.size() * 2, "y4"), yq = DeviceBuffer::alloc(x.size(), "yq");
    auto ys = DeviceBuffer::alloc(static_cast<size_t>(T) * 4, "ys");
    ASSERT_TRUE(y.ok() && y32.ok() && y4.ok() && yq.ok() && ys.ok());
    poison(*y), poison(*y4), poison(*yq), poison(*ys);
    ASSERT_EQ(detail::raw_rmsnorm_f32_contracts(xd.as<float>(), wd.as<float>(), T, H, 1e-6f,
                                                y->as<uint16_t>(), y32->as<float>(), y4->as<uint16_t>(),
                                                yq->as<uint8_t>(), ys->as<float>(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto yh = download<uint16_t>(*y, x.size());
    const auto y32h = download<float>(*y32, x.size());
    const auto y4h = download<uint16_t>(*y4, x.size());
    const auto yqh = download<uint8_t>(*yq, x.size());
    const auto ysh = download<float>(*ys, static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      double ss = 0;
      for (int i = 0; i < H; ++i)
        ss += static_cast<double>(x[static_cast<size_t>(t) * H + i]) * x[static_cast<size_t>(t) * H + i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / H) + 1e-6f);
      for (int i = 0; i < H; ++i) {
        const size_t j = static_cast<size_t>(t) * H + i;
        const float ref = w[static_cast<size_t>(i)] * (x[j] * inv);
        ASSERT_NEAR(y32h[j], ref, std::fabs(ref) * 1e-6f) << "H " << H << " row " << t << " col " << i;
        ASSERT_EQ(yh[j], f32_to_bf16(y32h[j])) << "H " << H << " row " << t << " col " << i;
      }
      const auto row =
          std::span<const uint16_t>(yh).subspan(static_cast<size_t>(t) * H, static_cast<size_t>(H));
      std::vector<uint16_t> r4(static_cast<size_t>(H));
      ASSERT_OK(qdq_fp4_row(row, r4));
      std::vector<uint8_t> rq(static_cast<size_t>(H));
      const float s = quantize_fp8_token_row(row, rq);
      ASSERT_EQ(std::bit_cast<uint32_t>(s), std::bit_cast<uint32_t>(ysh[static_cast<size_t>(t)]))
          << "H " << H;
      for (int i = 0; i < H; ++i) {
        const size_t j = static_cast<size_t>(t) * H + i;
        ASSERT_EQ(y4h[j], r4[static_cast<size_t>(i)]) << "fp4 H " << H << " row " << t << " col " << i;
        ASSERT_EQ(yqh[j], rq[static_cast<size_t>(i)]) << "fp8 H " << H << " row " << t << " col " << i;
      }
    }
  }
}

TEST(CudaForwardKernels, GateWithFp8ContractEqualsGateThenQuantize) {
  REQUIRE_GPU();
  Rng r(901);
  const int T = 3, nh = 72, d = 128, n = nh * d;
  std::vector<float> o(static_cast<size_t>(T) * n), g(static_cast<size_t>(T) * n);
  for (auto& v : o) v = r.uniform(-2.0f, 2.0f);
  for (auto& v : g) v = r.uniform(-6.0f, 6.0f);
  auto od = upload_vec(o, "o");
  auto gd = upload_vec(g, "g");
  for (const int mode : {0, 1, 2}) {
    const long long ld_g = mode == 1 ? nh : n;
    auto a = DeviceBuffer::alloc(o.size() * 2, "a"), b = DeviceBuffer::alloc(o.size() * 2, "b");
    auto qa = DeviceBuffer::alloc(o.size(), "qa"), qb = DeviceBuffer::alloc(o.size(), "qb");
    auto sa = DeviceBuffer::alloc(T * 4, "sa"), sb = DeviceBuffer::alloc(T * 4, "sb");
    ASSERT_TRUE(a.ok() && b.ok() && qa.ok() && qb.ok() && sa.ok() && sb.ok());
    ASSERT_EQ(
        detail::raw_gate(od.as<float>(), gd.as<float>(), ld_g, mode, T, nh, d, a->as<uint16_t>(), nullptr),
        cudaSuccess);
    ASSERT_OK(
        quantize_fp8_tokens(a->as<uint16_t>(), T, n, qa->as<uint8_t>(), sa->as<float>(), nullptr, false));
    ASSERT_EQ(detail::raw_gate_fp8(od.as<float>(), gd.as<float>(), ld_g, mode, T, nh, d, b->as<uint16_t>(),
                                   qb->as<uint8_t>(), sb->as<float>(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(download<uint16_t>(*a, o.size()), download<uint16_t>(*b, o.size())) << "mode " << mode;
    EXPECT_EQ(download<uint8_t>(*qa, o.size()), download<uint8_t>(*qb, o.size())) << "mode " << mode;
    const auto s1 = download<float>(*sa, T), s2 = download<float>(*sb, T);
    for (int t = 0; t < T; ++t)
      EXPECT_EQ(std::bit_cast<uint32_t>(s1[size_t(t)]), std::bit_cast<uint32_t>(s2[size_t(t)]))
          << "mode " << mode;
  }
}

}  // namespace
}  // namespace gridq::cuda::test

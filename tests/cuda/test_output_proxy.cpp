// The output proxy tr(ΔW H ΔWᵀ)/2 on the GPU (runtime/cuda/gptq/gptq_hook.h half_trace_host) against
// quant::output_half_trace: the same float64 bits, with rows that are exact (ΔW = 0 everywhere), columns
// with ΔW = 0 (the CPU skips them), a row count that does not fill the kernel's row groups, and
// Laguna-S-2.1's expert shape. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "quant/output_proxy.h"
#include "runtime/cuda/gptq/gptq_hook.h"

namespace gridq::cuda::test {
namespace {

TEST(CudaOutputProxy, SameBitsAsTheCpu) {
  REQUIRE_GPU();
  Rng rng(test_seed());
  for (auto [R, C] : {std::pair{7, 256}, {130, 512}, {1024, 3072}}) {
    std::vector<float> W(size_t(R) * C), Wh(W.size()), X(size_t(2 * C) * C), H(size_t(C) * C, 0.0f);
    for (auto& v : W) v = rng.uniform(-0.05f, 0.05f);
    for (size_t i = 0; i < W.size(); ++i) {
      const int r = static_cast<int>(i / C), c = static_cast<int>(i % C);
      Wh[i] = (r == 3 || c % 5 == 0) ? W[i] : W[i] + rng.uniform(-0.004f, 0.004f);
    }
    // H = XᵀX of random rows (symmetric, positive semidefinite), float32 as the capture gives it.
    for (auto& v : X) v = rng.uniform(-1.0f, 1.0f);
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < C; ++j) {
        float s = 0.0f;
        for (int t = 0; t < 2 * C; t += 16) s += X[size_t(t) * C + i] * X[size_t(t) * C + j];
        H[size_t(i) * C + j] = s;
      }
    auto want = quant::output_half_trace(W.data(), Wh.data(), R, C, H.data(), "test");
    ASSERT_TRUE(want.ok()) << want.message();
    auto got = half_trace_host(W.data(), Wh.data(), R, C, H.data());
    ASSERT_OK(got);
    EXPECT_EQ(std::memcmp(&*got, &*want, 8), 0)
        << "[" << R << ", " << C << "]: gpu " << *got << ", cpu " << *want;
  }
  EXPECT_FALSE(half_trace_host(nullptr, nullptr, 0, 0, nullptr).ok());
}

}  // namespace
}  // namespace gridq::cuda::test

// The GPU CB-GPTQ factorization's Cholesky (runtime/cuda/gptq/gptq_kernels.h raw_factor_init + raw_cholesky)
// against quant's cholesky_lower_inplace, bit for bit, for a batch of more Hessians than the GPU runs at
// once: every panel launch then has CTAs that start after the panel's first CTA has written its block (the
// race fixed in chol_panel: they must factor the block as it was, not as it was written). Skips without a
// GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "quant/hessian_factor.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/gptq/gptq_kernels.h"

namespace gridq::cuda::test {
namespace {

TEST(CudaGptqFactor, ManyHessiansSameBitsAsTheCpu) {
  REQUIRE_GPU();
  constexpr int nH = 96, C = 1024;  // 96 × 8 panel CTAs: more than an H200 holds at once
  Rng rng(test_seed());
  // Symmetric, diagonally dominant (positive definite) H, fp32 as the capture gives it.
  std::vector<float> H(size_t(nH) * C * C);
  for (int h = 0; h < nH; ++h) {
    float* Hh = H.data() + size_t(h) * C * C;
    for (int i = 0; i < C; ++i) {
      for (int j = 0; j < i; ++j)
        Hh[size_t(i) * C + j] = Hh[size_t(j) * C + i] = rng.uniform(-1.0f, 1.0f) / C;
      Hh[size_t(i) * C + i] = 1.0f + rng.uniform(0.0f, 1.0f);
    }
  }
  std::vector<long long> n(nH, 4096);
  std::vector<double> damp(nH, 0.1);
  auto Hd = DeviceBuffer::alloc(H.size() * 4, "test H");
  auto L = DeviceBuffer::alloc(H.size() * 8, "test L");
  auto nd = DeviceBuffer::alloc(nH * 8, "test n");
  auto dd = DeviceBuffer::alloc(nH * 8, "test damp");
  auto mean = DeviceBuffer::alloc(nH * 8, "test mean");
  auto flags = DeviceBuffer::alloc(4 * nH, "test flags");
  ASSERT_TRUE(Hd.ok() && L.ok() && nd.ok() && dd.ok() && mean.ok() && flags.ok());
  ASSERT_OK(Hd->upload(H.data(), H.size() * 4));
  ASSERT_OK(nd->upload(n.data(), nH * 8));
  ASSERT_OK(dd->upload(damp.data(), nH * 8));
  uint8_t* identity = flags->as<uint8_t>();
  uint8_t* bad = identity + nH;
  uint8_t* active = bad + nH;
  uint8_t* fail = active + nH;
  ASSERT_EQ(cudaMemset(active, 1, nH), cudaSuccess);
  ASSERT_EQ(cudaMemset(fail, 0, nH), cudaSuccess);
  ASSERT_EQ(gptq::raw_factor_init(Hd->as<float>(), nH, C, nd->as<long long>(), dd->as<double>(),
                                  L->as<double>(), mean->as<double>(), identity, bad, nullptr),
            cudaSuccess);
  ASSERT_EQ(gptq::raw_cholesky(L->as<double>(), nH, C, active, fail, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> got(H.size());
  std::vector<uint8_t> f(nH);
  ASSERT_OK(L->download(got.data(), got.size() * 8));
  ASSERT_EQ(cudaMemcpy(f.data(), fail, nH, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<int> differs(nH, 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int h = 0; h < nH; ++h) {
    const float* Hh = H.data() + size_t(h) * C * C;
    std::vector<double> A(size_t(C) * C, 0.0);
    double md = 0.0;
    for (int i = 0; i < C; ++i) md += Hh[size_t(i) * C + i];
    md /= C;
    for (int i = 0; i < C; ++i)
      for (int j = 0; j <= i; ++j) A[size_t(i) * C + j] = Hh[size_t(i) * C + j];
    for (int i = 0; i < C; ++i) A[size_t(i) * C + i] += 0.1 * md;
    if (!quant::cholesky_lower_inplace(A.data(), C)) differs[h] = -1;
    for (int i = 0; i < C && !differs[h]; ++i)
      for (int j = 0; j <= i; ++j)
        if (std::memcmp(&A[size_t(i) * C + j], &got[size_t(h) * C * C + size_t(i) * C + j], 8) != 0) {
          differs[h] = 1;
          break;
        }
  }
  for (int h = 0; h < nH; ++h) {
    EXPECT_EQ(f[h], 0) << "H " << h << ": the device reports a failed pivot";
    EXPECT_EQ(differs[h], 0) << "H " << h << ": the device factor differs from the CPU's";
  }
}

}  // namespace
}  // namespace gridq::cuda::test

// GPTQ of the FP8 formats on the GPU (runtime/cuda/gptq/gptq.h fp8_gptq) against the CPU encoders, through
// the quantizer's entry points: FP8_DYNAMIC (quant/fp8_weights.h quantize_fp8_per_channel_gptq_on_device)
// gives the same E4M3 bytes and scales, and the FP8-CB product rungs (quant/cb_gptq.h
// encode_fp8cb_cb_gptq_on_device) the same codes, row scales and decoded weights, for a well-conditioned
// Hessian, a rank-deficient one (damping decides), a cold input (no tokens: the plain nearest entry), outlier
// columns and a zero row, over several 256-column blocks; a batch of matrices sharing Hessians gives each
// matrix its one-matrix result. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>

#include "../quant/quant_test_util.h"
#include "cuda_test_util.h"
#include "quant/cb_gptq.h"
#include "quant/fp8_weights.h"
#include "quant/grid_values.h"
#include "quant/lattice_codebook.h"
#include "runtime/cuda/gptq/gptq.h"
#include "runtime/cuda/register.h"

namespace gridq::cuda::test {
namespace {

std::vector<float> weights(int R, int C, uint64_t seed) {
  auto w = quant::testing::gaussian(size_t(R) * C, seed, 0.02);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      if (j % 89 == 5) w[size_t(r) * C + j] *= 20.0f;       // outlier columns
  for (int j = 0; j < C; ++j) w[size_t(2) * C + j] = 0.0f;  // a zero row (scale 1)
  return w;
}

std::vector<float> hessian(int C, int64_t n, uint64_t seed) {
  if (n == 0) return std::vector<float>(size_t(C) * C, 0.0f);
  const quant::testing::Correlated gen(C, seed);
  return quant::testing::gram(gen.rows(n, seed + 1), n, C);
}

TEST(CudaFp8Gptq, SameBytesAsTheCpuEncoder) {
  REQUIRE_GPU();
  register_backend();
  const uint64_t seed = test_seed();
  struct Shape {
    int R, C;
    int64_t n;
  };
  for (const Shape& s : {Shape{40, 768, 2000}, Shape{24, 512, 200}, Shape{17, 256, 0}}) {
    const auto W = weights(s.R, s.C, seed + s.C);
    const auto H = hessian(s.C, s.n, seed + 7 * s.C);
    auto cpu = quant::quantize_fp8_per_channel_gptq(W.data(), s.R, s.C, H.data(), s.n, 0.1, 256);
    auto gpu = quant::quantize_fp8_per_channel_gptq_on_device(W.data(), s.R, s.C, H.data(), s.n, 0.1);
    ASSERT_TRUE(cpu.ok()) << cpu.message();
    ASSERT_TRUE(gpu.ok()) << gpu.message();
    EXPECT_TRUE(cpu->scale == gpu->scale) << s.R << "x" << s.C;
    size_t diff = 0;
    for (size_t i = 0; i < cpu->q.size(); ++i) diff += cpu->q[i] != gpu->q[i];
    EXPECT_EQ(diff, 0u) << s.R << "x" << s.C << " n " << s.n << ": " << diff << " of " << cpu->q.size()
                        << " codes differ";
  }
}

TEST(CudaFp8Gptq, Fp8CbSameEncodingAsTheCpu) {
  REQUIRE_GPU();
  register_backend();
  const uint64_t seed = test_seed();
  for (const char* rung : {"FP8_CB_K28", "FP8_CB_K32", "FP8_CB_K48"}) {
    auto r = gridbook::parse_rung_name(rung, 2);
    ASSERT_TRUE(r.ok()) << r.message();
    auto cb = quant::lattice_codebook(*r);
    ASSERT_TRUE(cb.ok()) << cb.message();
    for (int64_t n : {int64_t{1500}, int64_t{120}, int64_t{0}}) {
      const int R = 12, C = 512;
      const auto W = weights(R, C, seed + 3 * n);
      const auto H = hessian(C, n, seed + 5 * n + 1);
      std::vector<float> q(C, 1.0f);
      for (int j = 0; j < C && n > 0; ++j) q[j] = H[size_t(j) * C + j] / float(n);
      quant::CbGptqOptions opt;
      auto cpu = quant::encode_fp8cb_cb_gptq(*cb, W.data(), R, C, H.data(), n, q.data(), opt);
      auto gpu = quant::encode_fp8cb_cb_gptq_on_device(*cb, W.data(), R, C, H.data(), n, q.data(), opt);
      ASSERT_TRUE(cpu.ok()) << cpu.message();
      ASSERT_TRUE(gpu.ok()) << gpu.message();
      EXPECT_TRUE(cpu->codes == gpu->codes) << rung << " n " << n << ": codes differ";
      EXPECT_TRUE(cpu->row_scale == gpu->row_scale) << rung << " n " << n;
      EXPECT_TRUE(cpu->w_hat == gpu->w_hat) << rung << " n " << n;
      EXPECT_EQ(cpu->used_identity, gpu->used_identity) << rung << " n " << n;
      EXPECT_EQ(cpu->damp_used, gpu->damp_used) << rung << " n " << n;
    }
  }
}

// Three matrices over two Hessians in one batch: each matrix's indices are its one-matrix run's.
TEST(CudaFp8Gptq, BatchIsEachMatrixAlone) {
  REQUIRE_GPU();
  const uint64_t seed = test_seed();
  const int R = 16, C = 512;
  const std::vector<int> h_of = {0, 0, 1};
  const std::vector<int64_t> n = {1500, 300};
  std::vector<std::vector<float>> W, H;
  for (size_t m = 0; m < h_of.size(); ++m) W.push_back(weights(R, C, seed + 31 * m));
  for (size_t h = 0; h < n.size(); ++h) H.push_back(hessian(C, n[h], seed + 57 * h));
  const std::vector<float> g = quant::signed_grid_values(gridbook::Grid::FP8);
  ScalarBook book;
  book.entries = {static_cast<int>(g.size())};
  book.t.assign(g.begin(), g.end());
  auto scales_of = [&](const std::vector<float>& w) {
    auto f = quant::quantize_fp8_per_channel(w.data(), R, C);
    EXPECT_TRUE(f.ok());
    return std::vector<double>(f->scale.begin(), f->scale.end());
  };
  auto run = [&](const std::vector<int>& ms) {
    std::vector<float> w, hh;
    std::vector<double> sc;
    std::vector<int> hof;
    std::vector<int64_t> nt;
    std::vector<int> seen;
    for (int m : ms) {
      w.insert(w.end(), W[size_t(m)].begin(), W[size_t(m)].end());
      const auto s = scales_of(W[size_t(m)]);
      sc.insert(sc.end(), s.begin(), s.end());
      const int h = h_of[size_t(m)];
      auto it = std::find(seen.begin(), seen.end(), h);
      if (it == seen.end()) {
        seen.push_back(h);
        hh.insert(hh.end(), H[size_t(h)].begin(), H[size_t(h)].end());
        nt.push_back(n[size_t(h)]);
        it = seen.end() - 1;
      }
      hof.push_back(static_cast<int>(it - seen.begin()));
    }
    auto dw = DeviceBuffer::alloc(w.size() * 4, "test W");
    auto dh = DeviceBuffer::alloc(hh.size() * 4, "test H");
    EXPECT_TRUE(dw.ok() && dh.ok());
    EXPECT_TRUE(dw->upload(w.data(), w.size() * 4).ok());
    EXPECT_TRUE(dh->upload(hh.data(), hh.size() * 4).ok());
    CbGptqBatch job;
    job.R = R, job.C = C, job.M = static_cast<int>(ms.size()), job.nH = static_cast<int>(seen.size());
    job.W = dw->as<float>(), job.H = dh->as<float>();
    job.h_of = hof, job.n_tokens = nt;
    auto r = fp8_gptq(job, book, sc, CbGptqSettings{}, nullptr);
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? r->idx : std::vector<uint16_t>{};
  };
  const auto all = run({0, 1, 2});
  ASSERT_EQ(all.size(), size_t(3) * R * C);
  for (int m = 0; m < 3; ++m) {
    const auto alone = run({m});
    ASSERT_EQ(alone.size(), size_t(R) * C);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + size_t(m) * R * C)) << "matrix " << m;
  }
}

}  // namespace
}  // namespace gridq::cuda::test

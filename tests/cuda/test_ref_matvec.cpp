// The reference matvec's router path (BF16 weights, FP32 rows) bit for bit against the order it documents,
// computed on the host: per (token, row) 32 chains (chain l: blocks 32i + l, i ascending, 8 fmas each), then
// the xor-shuffle tree. Every kernel that serves the shape (one token a launch, a decode step's rows, a
// prefill step's shared-memory tiles) must give those bits, so a token's router logits do not depend on the
// step it is in. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::test {
namespace {

// The documented order of one sum (fmaf and IEEE addition are the same on host and device).
float chain_sum(const uint16_t* w, const float* x, int cols) {
  float lanes[32];
  const int nb = cols / 8;
  for (int l = 0; l < 32; ++l) {
    float acc = 0.0f;
    for (int b = l; b < nb; b += 32)
      for (int j = 0; j < 8; ++j) acc = std::fma(bf16_to_f32(w[8 * b + j]), x[8 * b + j], acc);
    lanes[l] = acc;
  }
  for (int o = 16; o; o >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ o];
    std::memcpy(lanes, next, sizeof(lanes));
  }
  return lanes[0];
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// y for tokens [p0, p0 + P) of x in one launch.
std::vector<float> run(const DeviceBuffer& w, const DeviceBuffer& x, int rows, int cols, int p0, int P) {
  detail::RefArgs a;
  a.w.format = detail::kRefBF16;
  a.w.rows = rows;
  a.w.cols = cols;
  a.w.data = w.as<uint8_t>();
  a.w.row_bytes = 2LL * cols;
  a.w.expert_stride = a.w.row_bytes * rows;
  a.P = P;
  a.x_f32 = x.as<float>() + static_cast<long long>(p0) * cols;
  auto y = DeviceBuffer::alloc(static_cast<size_t>(P) * rows * 4, "y");
  EXPECT_TRUE(y.ok());
  a.y = y->as<float>();
  a.ld_y = rows;
  EXPECT_EQ(detail::raw_ref_matvec(a, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return download<float>(*y, static_cast<size_t>(P) * rows);
}

void check(int rows, int cols, int T, uint64_t salt) {
  Rng r(salt);
  std::vector<uint16_t> w(static_cast<size_t>(rows) * cols);
  for (auto& v : w) v = r.bf16(0.05f);
  std::vector<float> x(static_cast<size_t>(T) * cols);
  for (auto& v : x) v = r.uniform(-3.0f, 3.0f);
  auto wd = upload_vec(w, "w");
  auto xd = upload_vec(x, "x");
  const auto all = run(wd, xd, rows, cols, 0, T);       // a prefill step: the tiled kernel when it serves
  const auto decode = run(wd, xd, rows, cols, 0, 48);   // a decode step's rows: tokens 0 … 47
  const auto tail = run(wd, xd, rows, cols, T - 1, 1);  // one token alone
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < rows; ++n) {
      const float ref = chain_sum(&w[static_cast<size_t>(n) * cols], &x[static_cast<size_t>(t) * cols], cols);
      const size_t i = static_cast<size_t>(t) * rows + n;
      ASSERT_EQ(bits(all[i]), bits(ref))
          << rows << "x" << cols << " T " << T << ": token " << t << " row " << n;
      if (t < 48) {
        ASSERT_EQ(bits(decode[i]), bits(ref)) << "decode step: token " << t << " row " << n;
      }
    }
  for (int n = 0; n < rows; ++n)
    ASSERT_EQ(bits(tail[static_cast<size_t>(n)]), bits(all[static_cast<size_t>(T - 1) * rows + n]))
        << "alone vs in the step, row " << n;
}

TEST(CudaRefMatvec, RouterSameBitsAtEveryStepSize) {
  REQUIRE_GPU();
  check(256, 3072, 530, 1);  // Laguna-S-2.1's router, a step that is not a whole number of tiles
  check(12, 512, 200, 2);    // the bundled model's 12 experts (one partial row tile)
  check(100, 256, 65, 3);    // one round, just past a decode step
  check(128, 2056, 90, 4);   // cols not a multiple of 256: the warp-per-row kernel
}

}  // namespace
}  // namespace gridq::cuda::test

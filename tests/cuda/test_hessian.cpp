// The device H = Σ xᵀx (runtime/cuda/hessian.h) against the CPU accumulator (quant/hessian_accum.h): the
// same rows, delivered in different chunk sizes, give the same bits, with and without row scales, at widths
// that do and do not fill the 64-column tiles; and the throughput at Laguna-S-2.1's widths (printed, not
// asserted: speed belongs to bench/). Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "cuda_test_util.h"
#include "quant/hessian_accum.h"
#include "runtime/cuda/hessian.h"
#include "runtime/cuda/register.h"

namespace gridq::cuda::test {
namespace {

// Rows of mixed magnitude (activations have outlier columns), with some exact zeros and negative zeros.
std::vector<float> random_rows(Rng& rng, int64_t n, int C) {
  std::vector<float> x(static_cast<size_t>(n * C));
  for (int64_t r = 0; r < n; ++r)
    for (int c = 0; c < C; ++c) {
      float v = rng.uniform(-1.0f, 1.0f);
      if (c % 37 == 5) v *= 40.0f;
      if (rng.uniform_int(0, 50) == 0) v = (c & 1) ? -0.0f : 0.0f;
      x[static_cast<size_t>(r * C + c)] = v;
    }
  return x;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements differ, first at " << first << " (gpu "
                     << got[first] << ", cpu " << want[first] << ")";
}

TEST(CudaHessian, SameBitsAsTheCpuAccumulator) {
  REQUIRE_GPU();
  Rng rng(41);
  auto stream = Stream::create();
  ASSERT_OK(stream);
  for (const int C : {200, 256}) {
    for (const bool scaled : {false, true}) {
      // 3 whole blocks and a partial one; delivered in chunks that straddle block boundaries on the GPU
      // and in one piece on the CPU.
      const int64_t n = 3 * 256 + 77;
      const auto x = random_rows(rng, n, C);
      std::vector<float> scale(static_cast<size_t>(n));
      for (auto& s : scale) s = rng.uniform(0.0f, 1.0f);
      quant::HessianAccumulator cpu(C);
      cpu.add_rows(x.data(), n, scaled ? scale.data() : nullptr);
      const auto want = cpu.finish();

      auto dx = DeviceBuffer::alloc(x.size() * 4, "x");
      auto ds = DeviceBuffer::alloc(scale.size() * 4, "scale");
      ASSERT_OK(dx);
      ASSERT_OK(ds);
      ASSERT_OK(dx->upload(x.data(), x.size() * 4));
      ASSERT_OK(ds->upload(scale.data(), scale.size() * 4));
      auto gpu = DeviceHessian::create(C, stream->get());
      ASSERT_OK(gpu);
      int64_t at = 0;
      for (const int64_t chunk : {100, 333, 1, 500}) {
        const int64_t k = std::min(chunk, n - at);
        ASSERT_OK(gpu->add_rows(dx->as<float>() + at * C, k, scaled ? ds->as<float>() + at : nullptr));
        at += k;
      }
      ASSERT_EQ(at, n);
      EXPECT_EQ(gpu->rows(), n);
      auto got = gpu->finish();
      ASSERT_OK(got);
      expect_same_bits(*got, want, scaled ? "scaled rows" : "plain rows");
    }
  }
}

TEST(CudaHessian, StagingPastItsCapacityKeepsTheBlockOrder) {
  REQUIRE_GPU();
  Rng rng(42);
  auto stream = Stream::create();
  ASSERT_OK(stream);
  const int C = 64;
  const int64_t n = DeviceHessian::kStageRows + 3 * 256 + 5;  // one launch at the full stage, then the rest
  const auto x = random_rows(rng, n, C);
  quant::HessianAccumulator cpu(C);
  cpu.add_rows(x.data(), n);
  const auto want = cpu.finish();
  auto dx = DeviceBuffer::alloc(x.size() * 4, "x");
  ASSERT_OK(dx);
  ASSERT_OK(dx->upload(x.data(), x.size() * 4));
  auto gpu = DeviceHessian::create(C, stream->get());
  ASSERT_OK(gpu);
  ASSERT_OK(gpu->add_rows(dx->as<float>(), n));
  auto got = gpu->finish();
  ASSERT_OK(got);
  expect_same_bits(*got, want, "past the staging capacity");
}

// The quantizer's accumulator with its H on the device (`quantize --device cuda`): rows delivered as the
// streamer delivers them (one at a time, chunks, absorb() between) give the CPU accumulator's bits.
TEST(CudaHessian, QuantizerAccumulatorOnTheDeviceSameBits) {
  REQUIRE_GPU();
  register_backend();
  Rng rng(44);
  const int C = 320;
  const int64_t n = 5 * 256 + 19;
  const auto x = random_rows(rng, n, C);
  std::vector<float> scale(static_cast<size_t>(n));
  for (auto& v : scale) v = rng.uniform(0.0f, 2.0f);
  quant::HessianAccumulator cpu(C);
  cpu.add_rows(x.data(), n, scale.data());
  const auto want = cpu.finish();
  auto dev = quant::HessianAccumulator::on_device(C);
  ASSERT_OK(dev);
  int64_t at = 0;
  for (const int64_t chunk : {1, 1, 300, 7, 600}) {
    dev->add_rows(x.data() + at * C, chunk, scale.data() + at);
    dev->absorb();
    at += chunk;
  }
  dev->add_rows(x.data() + at * C, n - at, scale.data() + at);
  const auto got = dev->finish();
  ASSERT_OK(dev->status());
  expect_same_bits(got, want, "quantizer accumulator on the device");
}

TEST(CudaHessian, RefusesBadShapes) {
  REQUIRE_GPU();
  EXPECT_FALSE(DeviceHessian::create(0, nullptr).ok());
}

// Throughput at the widths of Laguna-S-2.1's Linear inputs (hidden 3072, expert intermediate 1024).
TEST(CudaHessian, ThroughputAtLagunaWidths) {
  REQUIRE_GPU();
  Rng rng(43);
  auto stream = Stream::create();
  ASSERT_OK(stream);
  for (const int C : {3072, 1024}) {
    const int64_t n = 16384;
    const auto x = random_rows(rng, n, C);
    auto dx = DeviceBuffer::alloc(x.size() * 4, "x");
    ASSERT_OK(dx);
    ASSERT_OK(dx->upload(x.data(), x.size() * 4));
    auto gpu = DeviceHessian::create(C, stream->get());
    ASSERT_OK(gpu);
    ASSERT_OK(gpu->add_rows(dx->as<float>(), n));  // warm-up launch
    ASSERT_OK(stream->sync());
    const int reps = 4;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) ASSERT_OK(gpu->add_rows(dx->as<float>(), n));
    ASSERT_OK(stream->sync());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Useful work: the upper triangle, C·(C+1)/2 elements × 2 flops per row.
    const double tflops = 2.0 * reps * n * C * (C + 1) / 2.0 / s / 1e12;
    std::printf("[gpu hessian] C %d: %lld rows in %.2f ms = %.1f M rows/s, %.1f TFLOP/s (upper triangle)\n",
                C, static_cast<long long>(reps * n), s * 1e3, reps * n / s / 1e6, tflops);
  }
}

}  // namespace
}  // namespace gridq::cuda::test

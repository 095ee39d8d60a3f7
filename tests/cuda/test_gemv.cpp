// GEMV kernels against float64 CPU references on fresh random inputs; CB weight decode bit-exact against the
// gridbook reference decoder (gridbook::decode_row). Outputs are poisoned first, so unwritten elements fail.
#include <gtest/gtest.h>

#include <cstring>

#include "core/act_qdq.h"
#include "cuda_test_util.h"

namespace gridq::cuda::test {
namespace {

struct Ctx {
  WorkspaceBuffers wsb;
};
Ctx& ctx() {
  static Ctx c = [] {
    auto w = WorkspaceBuffers::create();
    EXPECT_TRUE(w.ok()) << w.message();
    return Ctx{std::move(*w)};
  }();
  return c;
}

std::vector<float> run_gemv(const DeviceMatrix& m, int M, const DeviceBuffer& x, const float* xscale,
                            OutType out) {
  const size_t n = static_cast<size_t>(M) * m.rows;
  auto y = DeviceBuffer::alloc(n * 4, "y");
  EXPECT_TRUE(y.ok());
  poison(*y);
  GemvArgs a;
  a.w = &m;
  a.M = M;
  a.x = x.as();
  a.xscale = xscale;
  a.y = y->as();
  a.out = out;
  auto st = gemv(a, ctx().wsb.ws, nullptr, false);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> r(n);
  if (out == OutType::F32) {
    r = download<float>(*y, n);
  } else {
    auto b = download<uint16_t>(*y, n);
    for (size_t i = 0; i < n; ++i) r[i] = bf16_to_f32(b[i]);
  }
  return r;
}

TEST(CudaCb, DecodeBitExactEveryRung) {
  REQUIRE_GPU();
  Rng r(10);
  for (int k : {12, 16, 20, 24})
    for (int v : {1, 2}) {
      const int rows = 48, in = 768;
      CbMatrix m = make_cb_matrix(k, v, rows, in, r);
      auto d = upload_cb(k, v, rows, in, 1, m.canonical, m.cb_f16, default_v2_table());
      ASSERT_TRUE(d.ok()) << d.message();
      EXPECT_EQ(d->relayout_bytes, m.canonical.size());
      auto out = DeviceBuffer::alloc(m.dense.size() * 2, "dense");
      ASSERT_TRUE(out.ok());
      poison(*out);
      ASSERT_OK(cb_decode_dense(d->m, out->as<uint16_t>(), nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto got = download<uint16_t>(*out, m.dense.size());
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != m.dense[i] && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0u) << "K" << k << " v" << v << ": first mismatch at " << first << " got " << got[first]
                         << " want " << m.dense[first];
    }
}

void check_cb_gemv(int k, int v, int rows, int in, std::initializer_list<int> Ms, uint64_t salt) {
  Rng r(salt);
  CbMatrix m = make_cb_matrix(k, v, rows, in, r);
  auto d = upload_cb(k, v, rows, in, 1, m.canonical, m.cb_f16, default_v2_table());
  ASSERT_TRUE(d.ok()) << d.message();
  const auto w = widen_bf16(m.dense);
  for (int M : Ms) {
    // Activations through the FP4 contract, as the kernel's inputs are in serving.
    auto xr = random_bf16(static_cast<size_t>(M) * in, 4.0f, r);
    std::vector<uint16_t> x(xr.size());
    ASSERT_OK(qdq_fp4_row(xr, x));
    auto xd = upload_vec(x, "x");
    std::vector<double> ref, absref;
    reference(w, widen_bf16(x), rows, in, M, ref, absref);
    auto y = run_gemv(d->m, M, xd, nullptr, OutType::BF16);
    expect_close(y, ref, absref, Tol{},
                 "cb K" + std::to_string(k) + " v" + std::to_string(v) + " " + std::to_string(rows) + "x" +
                     std::to_string(in) + " M=" + std::to_string(M));
  }
}

TEST(CudaCb, GemvEveryRungSmall) {
  REQUIRE_GPU();
  for (int k : {12, 16, 20, 24})
    for (int v : {1, 2}) check_cb_gemv(k, v, 64, 1024, {1, 5, 11}, 100 + k * 3 + v);
}

TEST(CudaCb, GemvK16V2DecodeShapes) {
  REQUIRE_GPU();
  check_cb_gemv(16, 2, 512, 3072, {1, 2, 8, 9, 16}, 200);
  check_cb_gemv(16, 2, 3072, 1024, {1, 4}, 201);
}

TEST(CudaCb, GemvIsDeterministic) {
  REQUIRE_GPU();
  Rng r(300);
  CbMatrix m = make_cb_matrix(16, 2, 256, 2048, r);
  auto d = upload_cb(16, 2, 256, 2048, 1, m.canonical, m.cb_f16, default_v2_table());
  ASSERT_TRUE(d.ok());
  auto x = upload_vec(random_bf16(3 * 2048, 2.0f, r), "x");
  auto a = run_gemv(d->m, 3, x, nullptr, OutType::F32);
  auto b = run_gemv(d->m, 3, x, nullptr, OutType::F32);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

TEST(CudaBf16, Gemv) {
  REQUIRE_GPU();
  Rng r(400);
  for (auto [rows, in] : {std::pair{256, 3072}, std::pair{1024, 1024}, std::pair{96, 192}}) {
    auto wv = random_bf16(static_cast<size_t>(rows) * in, 1.0f, r);
    auto d = upload_bf16(rows, in, 1, wv);
    ASSERT_TRUE(d.ok()) << d.message();
    const auto w = widen_bf16(wv);
    for (int M : {1, 7, 16}) {
      auto x = random_bf16(static_cast<size_t>(M) * in, 3.0f, r);
      auto xd = upload_vec(x, "x");
      std::vector<double> ref, absref;
      reference(w, widen_bf16(x), rows, in, M, ref, absref);
      for (OutType o : {OutType::BF16, OutType::F32}) {
        auto y = run_gemv(d->m, M, xd, nullptr, o);
        Tol tol;
        if (o == OutType::F32) tol.rel = 1e-6;
        expect_close(y, ref, absref, tol,
                     "bf16 " + std::to_string(rows) + "x" + std::to_string(in) + " M=" + std::to_string(M) +
                         (o == OutType::F32 ? " f32" : " bf16"));
      }
    }
  }
}

TEST(CudaFp8, W8A8GemvWithTokenQuantization) {
  REQUIRE_GPU();
  Rng r(500);
  for (auto [rows, in] : {std::pair{256, 3072}, std::pair{128, 1024}}) {
    std::vector<uint8_t> wq(static_cast<size_t>(rows) * in);
    for (auto& b : wq) {
      b = static_cast<uint8_t>(r.u64());
      if ((b & 0x7F) == 0x7F) b ^= 1;
    }
    std::vector<float> ws(static_cast<size_t>(rows));
    for (auto& s : ws) s = r.uniform(1e-4f, 1e-2f);
    auto d = upload_fp8(rows, in, 1, wq, ws);
    ASSERT_TRUE(d.ok()) << d.message();
    for (int M : {1, 4, 12}) {
      auto x = random_bf16(static_cast<size_t>(M) * in, 5.0f, r);
      if (M > 1) x[static_cast<size_t>(in) + 3] = 0x8000;  // a -0
      auto xd = upload_vec(x, "x");
      auto q = DeviceBuffer::alloc(x.size(), "q");
      auto s = DeviceBuffer::alloc(static_cast<size_t>(M) * 4, "s");
      ASSERT_TRUE(q.ok() && s.ok());
      poison(*q);
      poison(*s);
      ASSERT_OK(
          quantize_fp8_tokens(xd.as<uint16_t>(), M, in, q->as<uint8_t>(), s->as<float>(), nullptr, false));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto qh = download<uint8_t>(*q, x.size());
      auto sh = download<float>(*s, static_cast<size_t>(M));
      // Per-token quantization is bit-exact against the CPU contract.
      std::vector<double> xq(x.size());
      for (int m = 0; m < M; ++m) {
        std::vector<uint8_t> qc(static_cast<size_t>(in));
        const float sc =
            quantize_fp8_token_row(std::span<const uint16_t>(x).subspan(static_cast<size_t>(m) * in, in), qc);
        ASSERT_EQ(std::bit_cast<uint32_t>(sc), std::bit_cast<uint32_t>(sh[static_cast<size_t>(m)]))
            << "token " << m;
        for (int k = 0; k < in; ++k) {
          ASSERT_EQ(qc[static_cast<size_t>(k)], qh[static_cast<size_t>(m) * in + k])
              << "token " << m << " k " << k;
          xq[static_cast<size_t>(m) * in + k] = e4m3_to_f32(qc[static_cast<size_t>(k)]);
        }
      }
      std::vector<double> w(wq.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = e4m3_to_f32(wq[i]);
      std::vector<double> ref, absref;
      reference(w, xq, rows, in, M, ref, absref);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < rows; ++n) {
          const double f = static_cast<double>(sh[static_cast<size_t>(m)]) * ws[static_cast<size_t>(n)];
          ref[static_cast<size_t>(m) * rows + n] *= f;
          absref[static_cast<size_t>(m) * rows + n] *= f;
        }
      auto y = run_gemv(d->m, M, *q, s->as<float>(), OutType::BF16);
      expect_close(y, ref, absref, Tol{},
                   "fp8 " + std::to_string(rows) + "x" + std::to_string(in) + " M=" + std::to_string(M));
    }
  }
}

TEST(CudaGemv, RefusesBadArguments) {
  REQUIRE_GPU();
  DeviceMatrix m;
  GemvArgs a;
  a.w = &m;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());  // no bytes
  uint8_t dummy = 0;
  m.tiles = &dummy;
  m.rows = 17;
  m.in = 64;
  a.x = &dummy;
  a.y = &dummy;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());  // rows % 16
  m.rows = 16;
  a.M = kMaxGemmRows + 1;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());  // M past the GEMM's rows
  a.M = 0;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());
  a.M = 1;
  m.format = WeightFormat::CB;
  m.in = 256;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());  // no codebook
  m.format = WeightFormat::FP8;
  EXPECT_FALSE(gemv(a, ctx().wsb.ws, nullptr, false).ok());  // no weight_scale
}

}  // namespace
}  // namespace gridq::cuda::test

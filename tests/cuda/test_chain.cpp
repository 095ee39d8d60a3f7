// The persistent GEMV chain (gemv_chain) against float64 references on fresh random inputs. Steps are chained
// through memory (step i+1's input IS step i's output buffer), so a missing or leaky grid barrier shows up as
// poison or stale values in the next step; each step's reference is computed from the exact BF16 values the
// previous step wrote. Every output is poisoned first.
#include <gtest/gtest.h>

#include <cstring>

#include "core/act_qdq.h"
#include "cuda_test_util.h"

namespace gridq::cuda::test {
namespace {

WorkspaceBuffers& wsb() {
  static WorkspaceBuffers w = [] {
    auto x = WorkspaceBuffers::create();
    EXPECT_TRUE(x.ok()) << x.message();
    return std::move(*x);
  }();
  return w;
}

// A weight matrix for a chain test: device copy plus the exact dense values (as double) for the reference.
struct TestMatrix {
  DeviceWeights d;
  std::vector<double> w;  // [rows, in]
};

TestMatrix make_matrix(WeightFormat f, int k, int v, int rows, int in, Rng& r) {
  TestMatrix t;
  if (f == WeightFormat::CB) {
    CbMatrix m = make_cb_matrix(k, v, rows, in, r);
    auto d = upload_cb(k, v, rows, in, 1, m.canonical, m.cb_f16, default_v2_table());
    EXPECT_TRUE(d.ok()) << d.message();
    t.d = std::move(*d);
    t.w = widen_bf16(m.dense);
  } else {
    // Scaled so that a chain of steps keeps the activations' magnitude (variance in ≈ variance out).
    auto wv = random_bf16(static_cast<size_t>(rows) * in, std::sqrt(3.0f / static_cast<float>(in)), r);
    auto d = upload_bf16(rows, in, 1, wv);
    EXPECT_TRUE(d.ok()) << d.message();
    t.d = std::move(*d);
    t.w = widen_bf16(wv);
  }
  return t;
}

// Runs a dependent chain x -> W0 -> W1 -> ... (BF16 outputs) and checks every step.
void check_dependent_chain(WeightFormat f, int k, int v, const std::vector<int>& dims, int M, uint64_t salt,
                           const std::string& what) {
  Rng r(salt);
  const int n = static_cast<int>(dims.size()) - 1;
  std::vector<TestMatrix> mats;
  for (int i = 0; i < n; ++i)
    mats.push_back(make_matrix(f, k, v, dims[static_cast<size_t>(i) + 1], dims[static_cast<size_t>(i)], r));
  std::vector<uint16_t> x0 = random_bf16(static_cast<size_t>(M) * dims[0], 2.0f, r);
  if (f == WeightFormat::CB) {
    std::vector<uint16_t> q(x0.size());
    ASSERT_OK(qdq_fp4_row(x0, q));
    x0 = q;
  }
  std::vector<DeviceBuffer> act;
  act.push_back(upload_vec(x0, "x0"));
  for (int i = 0; i < n; ++i) {
    auto b = DeviceBuffer::alloc(static_cast<size_t>(M) * dims[static_cast<size_t>(i) + 1] * 2 + 16, "y");
    ASSERT_TRUE(b.ok());
    poison(*b);
    act.push_back(std::move(*b));
  }
  std::vector<ChainStep> steps(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ChainStep& s = steps[static_cast<size_t>(i)];
    s.w = &mats[static_cast<size_t>(i)].d.m;
    s.M = M;
    s.x = act[static_cast<size_t>(i)].as();
    s.y = act[static_cast<size_t>(i) + 1].as();
  }
  ASSERT_OK(gemv_chain(steps.data(), n, wsb().ws, nullptr, false));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> xin = x0;
  for (int i = 0; i < n; ++i) {
    const int in = dims[static_cast<size_t>(i)], rows = dims[static_cast<size_t>(i) + 1];
    auto yb = download<uint16_t>(act[static_cast<size_t>(i) + 1], static_cast<size_t>(M) * rows);
    std::vector<double> ref, absref;
    reference(mats[static_cast<size_t>(i)].w, widen_bf16(xin), rows, in, M, ref, absref);
    std::vector<float> y(yb.size());
    for (size_t j = 0; j < y.size(); ++j) y[j] = bf16_to_f32(yb[j]);
    expect_close(y, ref, absref, Tol{}, what + " step " + std::to_string(i) + " M=" + std::to_string(M));
    xin = yb;
  }
}

// Both ways of filling the weight ring (copy engine, cp.async) must compute the same function.
class RingMode {
 public:
  explicit RingMode(bool copy_engine) : saved_(gemv_chain_copy_engine()) {
    set_gemv_chain_copy_engine(copy_engine);
  }
  ~RingMode() { set_gemv_chain_copy_engine(saved_); }
  RingMode(const RingMode&) = delete;
  RingMode& operator=(const RingMode&) = delete;

 private:
  bool saved_;
};
std::string mode_name(bool copy_engine) { return copy_engine ? " (copy engine)" : " (cp.async)"; }

TEST(CudaChain, DependentStepsBf16) {
  REQUIRE_GPU();
  for (bool ce : {true, false}) {
    RingMode mode(ce);
    for (int M : {1, 5, 12})
      check_dependent_chain(WeightFormat::BF16, 0, 0, {256, 512, 1024, 192, 3072}, M, 1000 + M + 50 * ce,
                            "chain bf16" + mode_name(ce));
  }
}

TEST(CudaChain, DependentStepsEveryCbRung) {
  REQUIRE_GPU();
  for (bool ce : {true, false}) {
    RingMode mode(ce);
    for (int k : {12, 16, 20, 24})
      for (int v : {1, 2})
        for (int M : {1, 9})
          check_dependent_chain(WeightFormat::CB, k, v, {256, 512, 768, 256}, M,
                                1100 + 10 * k + v + M + 500 * ce,
                                "chain cb K" + std::to_string(k) + " v" + std::to_string(v) + mode_name(ce));
  }
}

TEST(CudaChain, FortyEightStepsBf16) {
  REQUIRE_GPU();
  std::vector<int> dims(kMaxChainSteps + 1, 256);
  dims[24] = 512;
  for (bool ce : {true, false}) {
    RingMode mode(ce);
    check_dependent_chain(WeightFormat::BF16, 0, 0, dims, 3, 1200 + ce, "chain bf16 x48" + mode_name(ce));
  }
}

// FP8 W8A8 steps read E4M3 activations with per-token scales, so they are independent inputs here (the
// barrier is format-independent and covered above); checked like the single-kernel test.
TEST(CudaChain, Fp8Steps) {
  REQUIRE_GPU();
  Rng r(1300);
  const std::vector<std::pair<int, int>> shapes = {{1024, 3072}, {256, 1024}, {3072, 512}};
  for (int M : {1, 7, 13}) {
    RingMode mode(M != 7);  // copy engine at M = 1, 13; cp.async at M = 7
    std::vector<DeviceWeights> ds;
    std::vector<std::vector<double>> wd, wsc;
    std::vector<DeviceBuffer> xq, xs, ys;
    std::vector<std::vector<uint8_t>> xqh;
    std::vector<std::vector<float>> xsh;
    std::vector<ChainStep> steps;
    for (auto [rows, in] : shapes) {
      std::vector<uint8_t> wq(static_cast<size_t>(rows) * in);
      for (auto& b : wq) {
        b = static_cast<uint8_t>(r.u64());
        if ((b & 0x7F) == 0x7F) b ^= 1;
      }
      std::vector<float> s(static_cast<size_t>(rows));
      for (auto& x : s) x = r.uniform(1e-4f, 1e-2f);
      auto d = upload_fp8(rows, in, 1, wq, s);
      ASSERT_TRUE(d.ok()) << d.message();
      ds.push_back(std::move(*d));
      std::vector<double> w(wq.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = e4m3_to_f32(wq[i]);
      wd.push_back(std::move(w));
      wsc.emplace_back(s.begin(), s.end());
      std::vector<uint8_t> q(static_cast<size_t>(M) * in);
      for (auto& b : q) {
        b = static_cast<uint8_t>(r.u64());
        if ((b & 0x7F) == 0x7F) b ^= 1;
      }
      std::vector<float> ts(static_cast<size_t>(M));
      for (auto& x : ts) x = r.uniform(1e-3f, 1e-1f);
      xq.push_back(upload_vec(q, "xq"));
      xs.push_back(upload_vec(ts, "xs"));
      xqh.push_back(std::move(q));
      xsh.push_back(std::move(ts));
      auto y = DeviceBuffer::alloc(static_cast<size_t>(M) * rows * 4, "y");
      ASSERT_TRUE(y.ok());
      poison(*y);
      ys.push_back(std::move(*y));
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      ChainStep s;
      s.w = &ds[i].m;
      s.M = M;
      s.x = xq[i].as();
      s.xscale = xs[i].as<float>();
      s.y = ys[i].as();
      s.out = i == 1 ? OutType::F32 : OutType::BF16;
      steps.push_back(s);
    }
    // With programmatic dependent launch on a stream of its own (the serving configuration).
    auto stream = Stream::create();
    ASSERT_TRUE(stream.ok()) << stream.message();
    ASSERT_OK(gemv_chain(steps.data(), static_cast<int>(steps.size()), wsb().ws, stream->get(), true));
    ASSERT_OK(stream->sync());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [rows, in] = shapes[i];
      std::vector<double> x(xqh[i].size());
      for (size_t j = 0; j < x.size(); ++j) x[j] = e4m3_to_f32(xqh[i][j]);
      std::vector<double> ref, absref;
      reference(wd[i], x, rows, in, M, ref, absref);
      for (int m = 0; m < M; ++m)
        for (int nn = 0; nn < rows; ++nn) {
          const double fct =
              static_cast<double>(xsh[i][static_cast<size_t>(m)]) * wsc[i][static_cast<size_t>(nn)];
          ref[static_cast<size_t>(m) * rows + nn] *= fct;
          absref[static_cast<size_t>(m) * rows + nn] *= fct;
        }
      std::vector<float> y(static_cast<size_t>(M) * rows);
      Tol tol;
      if (steps[i].out == OutType::F32) {
        y = download<float>(ys[i], y.size());
        tol.rel = 1e-6;
      } else {
        auto b = download<uint16_t>(ys[i], y.size());
        for (size_t j = 0; j < y.size(); ++j) y[j] = bf16_to_f32(b[j]);
      }
      expect_close(y, ref, absref, tol, "chain fp8 step " + std::to_string(i) + " M=" + std::to_string(M));
    }
  }
}

// Fused gate+up+SiLU·mul steps, chained: h of step 0 is the input of step 1.
TEST(CudaChain, SwigluStepsBf16) {
  REQUIRE_GPU();
  Rng r(1400);
  const int H = 1024, I0 = 512, I1 = 256;
  for (int M : {1, 10}) {
    RingMode mode(M == 1);
    std::vector<uint16_t> w0(static_cast<size_t>(2 * I0) * H), w1(static_cast<size_t>(2 * I1) * I0);
    for (auto& v : w0) v = r.bf16(0.1f);
    for (auto& v : w1) v = r.bf16(0.1f);
    auto x = random_bf16(static_cast<size_t>(M) * H, 2.0f, r);
    auto d0 = upload_bf16(2 * I0, H, 1, w0);
    auto d1 = upload_bf16(2 * I1, I0, 1, w1);
    ASSERT_TRUE(d0.ok() && d1.ok());
    auto xd = upload_vec(x, "x");
    auto h0 = DeviceBuffer::alloc(static_cast<size_t>(M) * I0 * 2, "h0");
    auto h1 = DeviceBuffer::alloc(static_cast<size_t>(M) * I1 * 2, "h1");
    ASSERT_TRUE(h0.ok() && h1.ok());
    poison(*h0);
    poison(*h1);
    ChainStep s[2];
    s[0].w = &d0->m;
    s[0].x = xd.as();
    s[0].y = h0->as();
    s[1].w = &d1->m;
    s[1].x = h0->as();
    s[1].y = h1->as();
    for (auto& st : s) st.M = M, st.swiglu = true;
    ASSERT_OK(gemv_chain(s, 2, wsb().ws, nullptr, false));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto hh0 = download<uint16_t>(*h0, static_cast<size_t>(M) * I0);
    auto hh1 = download<uint16_t>(*h1, static_cast<size_t>(M) * I1);
    const std::vector<uint16_t>* ws[2] = {&w0, &w1};
    const std::vector<uint16_t>* ins[2] = {&x, &hh0};
    const std::vector<uint16_t>* outs[2] = {&hh0, &hh1};
    const int Is[2] = {I0, I1}, Hs[2] = {H, I0};
    for (int st = 0; st < 2; ++st) {
      std::vector<float> y;
      std::vector<double> ref, absref;
      for (int m = 0; m < M; ++m) {
        std::vector<uint16_t> xr(ins[st]->begin() + static_cast<long>(m) * Hs[st],
                                 ins[st]->begin() + static_cast<long>(m + 1) * Hs[st]);
        std::vector<double> h, ha;
        swiglu_ref(*ws[st], xr, Is[st], Hs[st], h, ha);
        ref.insert(ref.end(), h.begin(), h.end());
        absref.insert(absref.end(), ha.begin(), ha.end());
      }
      for (auto b : *outs[st]) y.push_back(bf16_to_f32(b));
      expect_close(y, ref, absref, Tol{1.0 / 64, 1.0 / 16384},
                   "chain swiglu step " + std::to_string(st) + " M=" + std::to_string(M));
    }
  }
}

TEST(CudaChain, IsDeterministic) {
  REQUIRE_GPU();
  Rng r(1500);
  CbMatrix m = make_cb_matrix(16, 2, 1024, 3072, r);
  auto d = upload_cb(16, 2, 1024, 3072, 1, m.canonical, m.cb_f16, default_v2_table());
  ASSERT_TRUE(d.ok());
  auto x = upload_vec(random_bf16(3 * 3072, 2.0f, r), "x");
  auto run = [&] {
    auto y = DeviceBuffer::alloc(3 * 1024 * 4, "y");
    EXPECT_TRUE(y.ok());
    poison(*y);
    ChainStep s[2];
    for (auto& st : s) st.w = &d->m, st.M = 3, st.x = x.as(), st.y = y->as(), st.out = OutType::F32;
    EXPECT_TRUE(gemv_chain(s, 2, wsb().ws, nullptr, false).ok());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return download<float>(*y, 3 * 1024);
  };
  auto a = run(), b = run();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

TEST(CudaChain, RefusesBadChains) {
  REQUIRE_GPU();
  Rng r(1600);
  auto wv = random_bf16(64 * 256, 1.0f, r);
  auto bf = upload_bf16(64, 256, 1, wv);
  std::vector<uint8_t> q(64 * 256, 0x38);
  std::vector<float> s(64, 1.0f);
  auto f8 = upload_fp8(64, 256, 1, q, s);
  ASSERT_TRUE(bf.ok() && f8.ok());
  uint8_t dummy[16] = {};
  ChainStep st[2];
  for (auto& x : st) x.w = &bf->m, x.x = dummy, x.y = dummy;
  EXPECT_FALSE(gemv_chain(st, 0, wsb().ws, nullptr, false).ok());                   // no steps
  EXPECT_FALSE(gemv_chain(st, kMaxChainSteps + 1, wsb().ws, nullptr, false).ok());  // too many
  st[1].w = &f8->m;
  EXPECT_FALSE(gemv_chain(st, 2, wsb().ws, nullptr, false).ok());  // mixed formats
  st[1].w = &bf->m;
  st[1].swiglu = true;
  EXPECT_FALSE(gemv_chain(st, 2, wsb().ws, nullptr, false).ok());  // mixed kinds
  st[1].swiglu = false;
  st[1].M = 17;
  EXPECT_FALSE(gemv_chain(st, 2, wsb().ws, nullptr, false).ok());  // M > 16
  Workspace no_barrier = wsb().ws;
  no_barrier.barrier = nullptr;
  st[1].M = 1;
  EXPECT_FALSE(gemv_chain(st, 2, no_barrier, nullptr, false).ok());
}

}  // namespace
}  // namespace gridq::cuda::test

// Fused SwiGLU GEMV (BF16 shared expert) and the routed MoE kernels (NVFP4-CB K16 v2 stacks) against float64
// references. The routed gate_up output passes through the FP4 contract, whose grid snapping turns a
// last-bit difference of a reordered sum into a whole grid step; that stage is therefore checked
// elementwise before QDQ and then by agreement of the QDQ'd values, and the down projection is checked on
// the kernel's own h so that its tolerance stays the tight reordered-sum one.
#include <gtest/gtest.h>

#include "core/act_qdq.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"

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

TEST(CudaMoe, Bf16SwigluSharedExpert) {
  REQUIRE_GPU();
  Rng r(900);
  const int I = 256, H = 1024;
  for (int M : {1, 3, 10}) {
    std::vector<uint16_t> w(static_cast<size_t>(2 * I) * H), x(static_cast<size_t>(M) * H);
    for (auto& v : w) v = r.bf16(0.1f);
    for (auto& v : x) v = r.bf16(2.0f);
    auto d = upload_bf16(2 * I, H, 1, w);
    ASSERT_TRUE(d.ok()) << d.message();
    auto xd = upload_vec(x, "x");
    auto hd = DeviceBuffer::alloc(static_cast<size_t>(M) * I * 2, "h");
    ASSERT_TRUE(hd.ok());
    poison(*hd);
    ASSERT_OK(gemv_swiglu(d->m, M, xd.as(), hd->as<uint16_t>(), false, wsb().ws, nullptr, false));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto hh = download<uint16_t>(*hd, static_cast<size_t>(M) * I);
    std::vector<float> y;
    std::vector<double> ref, absref;
    for (int m = 0; m < M; ++m) {
      std::vector<uint16_t> xr(x.begin() + static_cast<long>(m) * H,
                               x.begin() + static_cast<long>(m + 1) * H);
      std::vector<double> h, ha;
      swiglu_ref(w, xr, I, H, h, ha);
      ref.insert(ref.end(), h.begin(), h.end());
      absref.insert(absref.end(), ha.begin(), ha.end());
    }
    for (auto b : hh) y.push_back(bf16_to_f32(b));
    expect_close(y, ref, absref, Tol{1.0 / 64, 1.0 / 16384}, "bf16 swiglu M=" + std::to_string(M));
  }
}

TEST(CudaMoe, RoutedExpertsK16V2) {
  REQUIRE_GPU();
  Rng r(1000);
  const int E = 8, I = 256, H = 512, topk = 3;
  ExpertStacks st = make_expert_stacks(E, I, H, r);
  const auto& gu_dense = st.gu_dense;
  const auto& dn_dense = st.dn_dense;
  DeviceWeights* gud = &st.gate_up;
  DeviceWeights* dnd = &st.down;
  for (int M : {1, 5, 12}) {
    std::vector<uint16_t> xr(static_cast<size_t>(M) * H), x(xr.size());
    for (auto& v : xr) v = r.bf16(2.0f);
    ASSERT_OK(qdq_fp4_row(xr, x));
    std::vector<float> logits(static_cast<size_t>(M) * E), bias(static_cast<size_t>(E), 0.0f),
        add(static_cast<size_t>(M) * H);
    for (auto& v : logits) v = r.uniform(-3, 3);
    for (auto& v : add) v = r.uniform(-1, 1);
    auto xd = upload_vec(x, "x");
    auto ld = upload_vec(logits, "logits");
    auto bd = upload_vec(bias, "bias");
    auto addd = upload_vec(add, "add");
    const int max_slots = std::min(E, M * topk);
    auto ns = DeviceBuffer::alloc(4, "nslots");
    auto se = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * 4, "slot_expert");
    auto sw = DeviceBuffer::alloc(static_cast<size_t>(M) * topk * M * 4, "slot_weight");
    auto hd = DeviceBuffer::alloc(static_cast<size_t>(max_slots) * M * I * 2, "h");
    auto od = DeviceBuffer::alloc(static_cast<size_t>(M) * H * 2, "out");
    ASSERT_TRUE(ns.ok() && se.ok() && sw.ok() && hd.ok() && od.ok());
    poison(*hd);
    poison(*od);
    RouteArgs ra;
    ra.logits = ld.as<float>();
    ra.bias = bd.as<float>();
    ra.M = M;
    ra.E = E;
    ra.topk = topk;
    ra.nslots = ns->as<int>();
    ra.slot_expert = se->as<int>();
    ra.slot_weight = sw->as<float>();
    ASSERT_OK(route(ra, nullptr, false));
    MoeArgs a;
    a.gate_up = &gud->m;
    a.down = &dnd->m;
    a.M = M;
    a.max_slots = max_slots;
    a.x = xd.as<uint16_t>();
    a.nslots = ns->as<int>();
    a.slot_expert = se->as<int>();
    a.slot_weight = sw->as<float>();
    a.h = hd->as<uint16_t>();
    a.routed_scale = 2.5f;
    a.add = addd.as<float>();
    a.out = od->as<uint16_t>();
    ASSERT_OK(moe_gate_up(a, wsb().ws, nullptr, true));
    ASSERT_OK(moe_down(a, wsb().ws, nullptr, true));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const int n = download<int>(*ns, 1)[0];
    ASSERT_GE(n, topk);
    ASSERT_LE(n, max_slots);
    auto sexp = download<int>(*se, static_cast<size_t>(n));
    auto sww = download<float>(*sw, static_cast<size_t>(n) * M);
    auto hh = download<uint16_t>(*hd, static_cast<size_t>(n) * M * I);
    auto oh = download<uint16_t>(*od, static_cast<size_t>(M) * H);

    // gate_up + SiLU·mul + FP4 QDQ: the QDQ of the reference h must agree on nearly every element.
    size_t agree = 0, total = 0;
    double num = 0, den = 0;
    for (int s = 0; s < n; ++s)
      for (int m = 0; m < M; ++m) {
        std::vector<uint16_t> xm(x.begin() + static_cast<long>(m) * H,
                                 x.begin() + static_cast<long>(m + 1) * H);
        std::vector<double> h, ha;
        swiglu_ref(gu_dense[static_cast<size_t>(sexp[static_cast<size_t>(s)])], xm, I, H, h, ha);
        std::vector<uint16_t> hb(static_cast<size_t>(I)), hq(static_cast<size_t>(I));
        for (int i = 0; i < I; ++i)
          hb[static_cast<size_t>(i)] = f32_to_bf16(static_cast<float>(h[static_cast<size_t>(i)]));
        ASSERT_OK(qdq_fp4_row(hb, hq));
        for (int i = 0; i < I; ++i) {
          const uint16_t got = hh[(static_cast<size_t>(s) * M + m) * I + i];
          ASSERT_FALSE(std::isnan(bf16_to_f32(got)))
              << "unwritten h slot " << s << " token " << m << " i " << i;
          agree += got == hq[static_cast<size_t>(i)];
          ++total;
          const double dv = bf16_to_f32(got) - bf16_to_f32(hq[static_cast<size_t>(i)]);
          num += dv * dv;
          den += std::pow(bf16_to_f32(hq[static_cast<size_t>(i)]), 2);
        }
      }
    std::printf("[moe gate_up M=%d] %zu of %zu QDQ'd values identical, rel L2 %.3g\n", M, agree, total,
                std::sqrt(num / den));
    EXPECT_GE(static_cast<double>(agree), 0.98 * static_cast<double>(total));
    EXPECT_LT(std::sqrt(num / den), 0.03);

    // down + routing weights + routed scaling + add, on the kernel's h.
    std::vector<double> ref(static_cast<size_t>(M) * H, 0), absref(ref.size(), 0);
    for (int m = 0; m < M; ++m)
      for (int row = 0; row < H; ++row) {
        double acc = 0, aa = 0;
        for (int s = 0; s < n; ++s) {
          const double wgt = sww[static_cast<size_t>(s) * M + m];
          if (wgt == 0) continue;
          const auto& dw = dn_dense[static_cast<size_t>(sexp[static_cast<size_t>(s)])];
          double d = 0, da = 0;
          for (int k = 0; k < I; ++k) {
            const double p = bf16_to_f32(dw[static_cast<size_t>(row) * I + k]) *
                             bf16_to_f32(hh[(static_cast<size_t>(s) * M + m) * I + k]);
            d += p, da += std::fabs(p);
          }
          acc += wgt * d, aa += std::fabs(wgt) * da;
        }
        ref[static_cast<size_t>(m) * H + row] = 2.5 * acc + add[static_cast<size_t>(m) * H + row];
        absref[static_cast<size_t>(m) * H + row] =
            2.5 * aa + std::fabs(add[static_cast<size_t>(m) * H + row]);
      }
    std::vector<float> y;
    for (auto b : oh) y.push_back(bf16_to_f32(b));
    expect_close(y, ref, absref, Tol{}, "moe down M=" + std::to_string(M));
  }
}

}  // namespace
}  // namespace gridq::cuda::test

// CB-GPTQ refinement (cb_refine.h, issue 15 item 2): a round never raises the H-weighted error, refit scale
// codes stay legal for their superblock's E (on the format's grid), the refined encoding packs and decodes to
// exactly its w_hat, a zero H or zero passes changes nothing, and bytes do not depend on the thread count.
#include "quant/cb_refine.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "quant/lattice_codebook.h"
#include "quant_test_util.h"

namespace gridq::quant {
namespace {

using testing::k16;

struct Layer {
  int R = 48, C = 512;
  int64_t n = 1024;
  std::vector<float> W, H, q, X_hold;
};

const Layer& layer() {
  static const Layer L = [] {
    Layer l;
    testing::Correlated cor(l.C, 77);
    const std::vector<float> X = cor.rows(l.n, 78);
    l.X_hold = cor.rows(256, 79);
    l.H = testing::gram(X, l.n, l.C);
    l.q.resize(l.C);
    for (int j = 0; j < l.C; ++j) l.q[j] = l.H[size_t(j) * l.C + j] / static_cast<float>(l.n);
    l.W = testing::gaussian(size_t(l.R) * l.C, 80, 0.02);
    return l;
  }();
  return L;
}

Fp4CbEncoding gptq(const gridbook::Codebook& cb, const Layer& L) {
  auto g = encode_fp4_cb_gptq(cb, L.W.data(), L.R, L.C, L.H.data(), L.n, L.q.data());
  EXPECT_TRUE(g.ok()) << g.message();
  return *g;
}

TEST(CbRefine, NeverRaisesTheHWeightedErrorAndStaysOnTheGrid) {
  const gridbook::Codebook cb = k16();
  const Layer& L = layer();
  const Fp4CbEncoding g = gptq(cb, L);
  const double f_gptq = h_weighted_error(L.W.data(), g.w_hat.data(), L.H.data(), L.R, L.C, 0.1);
  double f_prev = f_gptq;
  for (int passes : {1, 2, 4}) {
    for (bool scales : {false, true}) {
      Fp4CbEncoding r = g;
      RefineOptions o;
      o.passes = passes;
      o.scales = scales;
      auto res = refine_fp4(cb, L.W.data(), L.H.data(), L.R, L.C, o, r);
      ASSERT_TRUE(res.ok()) << res.message();
      const double f = h_weighted_error(L.W.data(), r.w_hat.data(), L.H.data(), L.R, L.C, 0.1);
      EXPECT_NEAR(res->f_before, f_gptq, 1e-9 * f_gptq);
      EXPECT_NEAR(res->f_after, f, 1e-9 * f);
      EXPECT_LE(f, f_gptq) << passes << " passes, scales " << scales;
      EXPECT_GT(res->codes_changed, 0);
      if (!scales) {
        EXPECT_EQ(res->scales_changed, 0);
      }
      std::printf("passes %d scales %d: f %.6g -> %.6g (%.4f), %lld codes, %lld scales\n", passes, scales,
                  f_gptq, f, f / f_gptq, static_cast<long long>(res->codes_changed),
                  static_cast<long long>(res->scales_changed));
      if (scales && passes == 4) {
        EXPECT_LE(f, f_prev);
      }
      if (!scales) f_prev = std::min(f_prev, f);
      // Every scale code is legal for its E, the E are the GPTQ ones, and the bytes decode to w_hat.
      for (size_t i = 0; i < r.planes.size(); ++i) {
        EXPECT_EQ(r.planes[i].E, g.planes[i].E);
        for (int c : r.planes[i].c) EXPECT_TRUE(gridbook::v2_legal(r.planes[i].E, c));
      }
      auto bytes = pack_fp4_v2(cb.rung, r);
      ASSERT_TRUE(bytes.ok()) << bytes.message();
      ASSERT_TRUE(gridbook::check_scale_planes(cb.rung, *bytes, "refined").ok());
      const int64_t rb = gridbook::row_bytes(cb.rung, L.C);
      std::vector<uint16_t> out(L.C);
      int mismatches = 0;
      for (int row = 0; row < L.R; ++row) {
        gridbook::decode_row(cb.rung, cb, bytes->data() + row * rb, L.C, 0.0f, out.data());
        for (int j = 0; j < L.C; ++j)
          if (out[j] != f32_to_bf16(r.w_hat[size_t(row) * L.C + j])) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST(CbRefine, ScalesPassAloneLowersTheErrorOfRtnScales) {
  // RTN's scales are chosen on the unweighted-by-H error, so an H-metric refit of the codes-fixed scales has
  // something to find; the result must still lower f.
  const gridbook::Codebook cb = k16();
  const Layer& L = layer();
  auto rtn = encode_fp4_rtn(cb, L.W.data(), L.R, L.C, L.q.data());
  ASSERT_TRUE(rtn.ok());
  Fp4CbEncoding r = *rtn;
  RefineOptions o;
  o.passes = 1;
  o.scales = true;
  auto res = refine_fp4(cb, L.W.data(), L.H.data(), L.R, L.C, o, r);
  ASSERT_TRUE(res.ok()) << res.message();
  EXPECT_GT(res->scales_changed, 0);
  EXPECT_LT(res->f_after, res->f_before);
}

TEST(CbRefine, ZeroHessianOrZeroPassesChangeNothing) {
  const gridbook::Codebook cb = k16();
  const Layer& L = layer();
  const Fp4CbEncoding g = gptq(cb, L);
  const std::vector<float> zero(size_t(L.C) * L.C, 0.0f);
  for (int variant = 0; variant < 2; ++variant) {
    Fp4CbEncoding r = g;
    RefineOptions o;
    o.passes = variant == 0 ? 3 : 0;
    o.scales = true;
    auto res = refine_fp4(cb, L.W.data(), variant == 0 ? zero.data() : L.H.data(), L.R, L.C, o, r);
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->codes_changed + res->scales_changed, 0);
    EXPECT_EQ(*pack_fp4_v2(cb.rung, r), *pack_fp4_v2(cb.rung, g));
  }
}

TEST(CbRefine, DeterministicAcrossThreads) {
  const gridbook::Codebook cb = k16();
  const Layer& L = layer();
  const Fp4CbEncoding g = gptq(cb, L);
  const int saved = omp_get_max_threads();
  std::vector<uint64_t> hashes;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Fp4CbEncoding r = g;
    RefineOptions o;
    o.passes = 2;
    o.scales = true;
    ASSERT_TRUE(refine_fp4(cb, L.W.data(), L.H.data(), L.R, L.C, o, r).ok());
    hashes.push_back(testing::fnv1a(*pack_fp4_v2(cb.rung, r)));
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(hashes[0], hashes[1]);
  EXPECT_EQ(hashes[0], hashes[2]);
}

TEST(CbRefine, RefusesMismatchedEncodings) {
  const gridbook::Codebook cb = k16();
  const Layer& L = layer();
  Fp4CbEncoding g = gptq(cb, L);
  EXPECT_FALSE(refine_fp4(cb, L.W.data(), L.H.data(), L.R - 8, L.C, {}, g).ok());
  RefineOptions bad;
  bad.passes = -1;
  EXPECT_FALSE(refine_fp4(cb, L.W.data(), L.H.data(), L.R, L.C, bad, g).ok());
}

}  // namespace
}  // namespace gridq::quant

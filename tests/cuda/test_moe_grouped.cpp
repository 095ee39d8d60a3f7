// The grouped routed experts (kernels.h grouped_moe) against float64 references, and their batch invariance:
// a (token, expert) pair's h and y are bit-identical whether the token is alone in the step or one of 64,
// at any position among them (several of the expert's pairs in one item, or alone), and whichever item
// shape runs it (1 tile × 8 pairs on a warp, or 16 tiles × 64 pairs on a CTA: moe_grouped_wide.cu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/act_qdq.h"
#include "cuda_test_util.h"
#include "moe_test_util.h"

namespace gridq::cuda::test {
namespace {

constexpr int kWidePairsForTest = 64;  // pairs of a wide item (kparams.h kWidePairs)

struct GroupedOut {
  std::vector<uint16_t> h;  // [T·k, I]
  std::vector<float> y;     // [T·k, H]
};

GroupedOut run_grouped(const ExpertStacks& st, const std::vector<uint16_t>& x, const std::vector<int>& eid,
                       int T, int k, int E, int I, int H, int wide = -1, bool qdq_fp4 = true,
                       int paired = -1) {
  GroupedOut o;
  auto xd = upload_vec(x, "x");
  auto ed = upload_vec(eid, "eid");
  auto gd = DeviceBuffer::alloc(static_cast<size_t>(grouped_moe_grp_ints(T, k, E)) * 4, "grp");
  auto gud = DeviceBuffer::alloc(static_cast<size_t>(T) * k * 2 * I * 4, "gu");
  auto hd = DeviceBuffer::alloc(static_cast<size_t>(T) * k * I * 2, "h");
  auto yd = DeviceBuffer::alloc(static_cast<size_t>(T) * k * H * 4, "y");
  auto xpd = DeviceBuffer::alloc(static_cast<size_t>(T) * H * 2, "xp");
  EXPECT_TRUE(gd.ok() && gud.ok() && hd.ok() && yd.ok() && xpd.ok());
  if (!gd.ok() || !gud.ok() || !hd.ok() || !yd.ok() || !xpd.ok()) return o;
  poison(*hd);
  poison(*yd);
  GroupedMoeArgs a;
  a.gate_up = &st.gate_up.m;
  a.down = &st.down.m;
  a.T = T, a.k = k, a.E = E;
  a.eid = ed.as<int>();
  a.grp = gd->as<int>();
  a.x = xd.as<uint16_t>();
  a.gu = gud->as<float>();
  a.h = hd->as<uint16_t>();
  a.y = yd->as<float>();
  a.xp = xpd->as<uint16_t>();
  a.wide = wide;
  a.qdq_fp4 = qdq_fp4;
  a.paired = paired;
  auto s = grouped_moe(a, nullptr, true);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.h = download<uint16_t>(*hd, static_cast<size_t>(T) * k * I);
  // Wide items leave h unit-permuted (word w of a 256-column unit at 4·(w % 32) + w / 32): back to columns.
  if (grouped_moe_wide(a)) {
    const std::vector<uint16_t> hp = o.h;
    for (size_t u = 0; u < hp.size() / 256; ++u)
      for (int e = 0; e < 256; ++e) {
        const int w = e / 2;
        o.h[u * 256 + static_cast<size_t>(e)] =
            hp[u * 256 + static_cast<size_t>(2 * (4 * (w % 32) + w / 32) + e % 2)];
      }
  }
  o.y = download<float>(*yd, static_cast<size_t>(T) * k * H);
  return o;
}

// k distinct experts per token, ascending (route_tokens' order).
std::vector<int> random_choices(int T, int k, int E, Rng& r) {
  std::vector<int> ids;
  std::vector<int> all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  for (int t = 0; t < T; ++t) {
    std::shuffle(all.begin(), all.end(), r.g);
    std::vector<int> c(all.begin(), all.begin() + k);
    std::sort(c.begin(), c.end());
    ids.insert(ids.end(), c.begin(), c.end());
  }
  return ids;
}

TEST(CudaMoeGrouped, MatchesFloat64AndIsBatchInvariant) {
  REQUIRE_GPU();
  Rng r(2000);
  const int E = 16, I = 256, H = 512, k = 4;
  ExpertStacks st = make_expert_stacks(E, I, H, r);
  const int Tmax = 64;
  std::vector<uint16_t> xr(static_cast<size_t>(Tmax) * H), x(xr.size());
  for (auto& v : xr) v = r.bf16(2.0f);
  ASSERT_OK(qdq_fp4_row(xr, x));
  // Token 0 of the big step is crowded: every expert it picks is also picked by most of the others.
  std::vector<int> eid = random_choices(Tmax, k, E, r);
  for (int t = 1; t < Tmax; t += 2)
    for (int j = 0; j < k; ++j) eid[static_cast<size_t>(t * k + j)] = eid[static_cast<size_t>(j)];

  for (int T : {1, 5, 64}) {
    std::vector<uint16_t> xt(x.begin(), x.begin() + static_cast<long>(T) * H);
    std::vector<int> et(eid.begin(), eid.begin() + static_cast<long>(T) * k);
    GroupedOut o = run_grouped(st, xt, et, T, k, E, I, H);
    ASSERT_EQ(o.h.size(), static_cast<size_t>(T) * k * I);
    // gate_up + SiLU·mul + FP4 QDQ: the QDQ of the float64 h must agree on nearly every element.
    size_t agree = 0, total = 0;
    double num = 0, den = 0;
    std::vector<double> ref(static_cast<size_t>(T) * k * H), absref(ref.size());
    for (int t = 0; t < T; ++t) {
      std::vector<uint16_t> xm(xt.begin() + static_cast<long>(t) * H,
                               xt.begin() + static_cast<long>(t + 1) * H);
      for (int j = 0; j < k; ++j) {
        const size_t p = static_cast<size_t>(t) * k + j;
        const int e = et[p];
        std::vector<double> h, ha;
        swiglu_ref(st.gu_dense[static_cast<size_t>(e)], xm, I, H, h, ha);
        std::vector<uint16_t> hb(static_cast<size_t>(I)), hq(static_cast<size_t>(I));
        for (int i = 0; i < I; ++i)
          hb[static_cast<size_t>(i)] = f32_to_bf16(static_cast<float>(h[static_cast<size_t>(i)]));
        ASSERT_OK(qdq_fp4_row(hb, hq));
        for (int i = 0; i < I; ++i) {
          const uint16_t got = o.h[p * I + static_cast<size_t>(i)];
          ASSERT_FALSE(std::isnan(bf16_to_f32(got))) << "unwritten h, pair " << p << " i " << i;
          agree += got == hq[static_cast<size_t>(i)];
          ++total;
          const double dv = bf16_to_f32(got) - bf16_to_f32(hq[static_cast<size_t>(i)]);
          num += dv * dv;
          den += std::pow(bf16_to_f32(hq[static_cast<size_t>(i)]), 2);
        }
        // down on the kernel's own h.
        const auto& dw = st.dn_dense[static_cast<size_t>(e)];
        for (int row = 0; row < H; ++row) {
          double d = 0, da = 0;
          for (int c = 0; c < I; ++c) {
            const double v = static_cast<double>(bf16_to_f32(dw[static_cast<size_t>(row) * I + c])) *
                             bf16_to_f32(o.h[p * I + static_cast<size_t>(c)]);
            d += v, da += std::fabs(v);
          }
          ref[p * H + static_cast<size_t>(row)] = d;
          absref[p * H + static_cast<size_t>(row)] = da;
        }
      }
    }
    std::printf("[grouped moe T=%d] gate_up: %zu of %zu QDQ'd values identical, rel L2 %.3g\n", T, agree,
                total, std::sqrt(num / den));
    EXPECT_GE(static_cast<double>(agree), 0.98 * static_cast<double>(total));
    EXPECT_LT(std::sqrt(num / den), 0.03);
    expect_close(o.y, ref, absref, Tol{1e-6, 1.0 / 65536}, "grouped moe down T=" + std::to_string(T));
  }

  // Invariance: token 0 alone vs first of 64 vs at position 37 of 64 (rows 0 and 37 swapped).
  GroupedOut alone = run_grouped(st, std::vector<uint16_t>(x.begin(), x.begin() + H),
                                 std::vector<int>(eid.begin(), eid.begin() + k), 1, k, E, I, H);
  GroupedOut full = run_grouped(st, x, eid, Tmax, k, E, I, H);
  std::vector<uint16_t> xs = x;
  std::vector<int> es = eid;
  const int pos = 37;
  std::swap_ranges(xs.begin(), xs.begin() + H, xs.begin() + static_cast<long>(pos) * H);
  std::swap_ranges(es.begin(), es.begin() + k, es.begin() + static_cast<long>(pos) * k);
  GroupedOut moved = run_grouped(st, xs, es, Tmax, k, E, I, H);
  const size_t hn = static_cast<size_t>(k) * I, yn = static_cast<size_t>(k) * H;
  EXPECT_EQ(std::memcmp(alone.h.data(), full.h.data(), hn * 2), 0) << "h: alone vs first of 64";
  EXPECT_EQ(std::memcmp(alone.y.data(), full.y.data(), yn * 4), 0) << "y: alone vs first of 64";
  EXPECT_EQ(std::memcmp(alone.h.data(), moved.h.data() + pos * hn, hn * 2), 0) << "h: alone vs row 37 of 64";
  EXPECT_EQ(std::memcmp(alone.y.data(), moved.y.data() + pos * yn, yn * 4), 0) << "y: alone vs row 37 of 64";
  GroupedOut again = run_grouped(st, x, eid, Tmax, k, E, I, H);
  EXPECT_EQ(std::memcmp(full.y.data(), again.y.data(), full.y.size() * 4), 0) << "run to run";
}

// Prefill-sized steps: the pair sort over many warps' chunks, experts with several 64-pair blocks and with
// none, and the two item shapes giving the same bits (and both the float64 reference's values, above).
TEST(CudaMoeGrouped, WideItemsAreBitIdenticalToNarrow) {
  REQUIRE_GPU();
  Rng r(2002);
  const int E = 24, I = 256, H = 768, k = 6;
  ExpertStacks st = make_expert_stacks(E, I, H, r);
  for (int T : {40, 333}) {
    std::vector<uint16_t> xr(static_cast<size_t>(T) * H), x(xr.size());
    for (auto& v : xr) v = r.bf16(2.0f);
    ASSERT_OK(qdq_fp4_row(xr, x));
    // Expert 3 is never chosen; expert 5 by two tokens of three (several 64-pair blocks and a partial one).
    std::vector<int> pool, eid;
    for (int e = 0; e < E; ++e)
      if (e != 3) pool.push_back(e);
    for (int t = 0; t < T; ++t) {
      std::shuffle(pool.begin(), pool.end(), r.g);
      std::vector<int> c(pool.begin(), pool.begin() + k);
      if (t % 3 != 0 && std::find(c.begin(), c.end(), 5) == c.end()) c[0] = 5;
      std::sort(c.begin(), c.end());
      eid.insert(eid.end(), c.begin(), c.end());
    }
    int n3 = 0, n5 = 0;
    for (int e : eid) n3 += e == 3, n5 += e == 5;
    ASSERT_EQ(n3, 0);
    if (T > 300) {
      ASSERT_GT(n5, 2 * kWidePairsForTest);
    }
    GroupedOut narrow = run_grouped(st, x, eid, T, k, E, I, H, 0);
    GroupedOut wide = run_grouped(st, x, eid, T, k, E, I, H, 1);
    ASSERT_EQ(narrow.y.size(), wide.y.size());
    for (float v : wide.y) ASSERT_FALSE(std::isnan(v)) << "unwritten y (T=" << T << ")";
    EXPECT_EQ(std::memcmp(narrow.h.data(), wide.h.data(), narrow.h.size() * 2), 0) << "h, T=" << T;
    EXPECT_EQ(std::memcmp(narrow.y.data(), wide.y.data(), narrow.y.size() * 4), 0) << "y, T=" << T;
    // Narrow items of two tiles (gate_up: a gate tile + its up tile, h from the item's SwiGLU epilogue; down:
    // two adjacent tiles) and of one (FP32 gu, swiglu_pairs): the same bits, for both activation contracts.
    for (bool qdq : {true, false}) {
      GroupedOut two = run_grouped(st, x, eid, T, k, E, I, H, 0, qdq, 1);
      GroupedOut one = run_grouped(st, x, eid, T, k, E, I, H, 0, qdq, 0);
      for (float v : two.y) ASSERT_FALSE(std::isnan(v)) << "unwritten y, paired items (T=" << T << ")";
      EXPECT_EQ(std::memcmp(two.h.data(), one.h.data(), two.h.size() * 2), 0) << "paired h, T=" << T;
      EXPECT_EQ(std::memcmp(two.y.data(), one.y.data(), two.y.size() * 4), 0) << "paired y, T=" << T;
    }
  }
}

// Rings of padded, phase-rotated slots (moe_grouped.cu) and of unit-sized ones (paired items of more than
// 359 experts, whose padded rings do not fit beside the offset tables): the same bits. E = 400: paired items
// run the unit-sized slots, one-tile items the padded ones.
TEST(CudaMoeGrouped, PaddedAndUnitSizedRingSlotsSameBits) {
  REQUIRE_GPU();
  Rng r(2003);
  const int E = 400, I = 256, H = 512, k = 4, T = 24;
  ExpertStacks st = make_expert_stacks(E, I, H, r);
  std::vector<uint16_t> xr(static_cast<size_t>(T) * H), x(xr.size());
  for (auto& v : xr) v = r.bf16(2.0f);
  ASSERT_OK(qdq_fp4_row(xr, x));
  std::vector<int> eid;
  for (int t = 0; t < T; ++t) {
    std::vector<int> c;  // a few experts shared by many tokens, spread over the stack (last one included)
    for (int j = 0; j < k; ++j) c.push_back(1 + j * 97 + (t % 3) * 5);
    c[0] = E - 1 - t % 2;
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    ASSERT_EQ(static_cast<int>(c.size()), k);
    eid.insert(eid.end(), c.begin(), c.end());
  }
  GroupedOut two = run_grouped(st, x, eid, T, k, E, I, H, 0, true, 1);
  GroupedOut one = run_grouped(st, x, eid, T, k, E, I, H, 0, true, 0);
  for (float v : two.y) ASSERT_FALSE(std::isnan(v)) << "unwritten y";
  EXPECT_EQ(std::memcmp(two.h.data(), one.h.data(), two.h.size() * 2), 0) << "h";
  EXPECT_EQ(std::memcmp(two.y.data(), one.y.data(), two.y.size() * 4), 0) << "y";
}

// The default v2 scale table's scales by arithmetic (grouped kernels, DecCB::scale2_default) and any other
// table's by lookup: a table that differs from the default only at entry 15, on weights without code 15,
// gives the default table's bits (paired and one-tile items, a decode step and a larger one).
TEST(CudaMoeGrouped, ScaleTableLookupMatchesDefaultTableArithmetic) {
  REQUIRE_GPU();
  const int E = 12, I = 256, H = 512, k = 4;
  auto other = default_v2_table();
  other[15] = 4.0f;  // exact E4M3, so a legal entry
  Rng r1(2004), r2(2004);
  ExpertStacks a = make_expert_stacks(E, I, H, r1, default_v2_table(), true);
  ExpertStacks b = make_expert_stacks(E, I, H, r2, other, true);
  ASSERT_EQ(a.gu_dense, b.gu_dense);
  for (int T : {3, 40}) {
    std::vector<uint16_t> xr(static_cast<size_t>(T) * H), x(xr.size());
    for (auto& v : xr) v = r1.bf16(2.0f);
    ASSERT_OK(qdq_fp4_row(xr, x));
    const std::vector<int> eid = random_choices(T, k, E, r1);
    for (int paired : {0, 1}) {
      GroupedOut da = run_grouped(a, x, eid, T, k, E, I, H, 0, true, paired);
      GroupedOut db = run_grouped(b, x, eid, T, k, E, I, H, 0, true, paired);
      for (float v : da.y) ASSERT_FALSE(std::isnan(v)) << "unwritten y";
      EXPECT_EQ(std::memcmp(da.h.data(), db.h.data(), da.h.size() * 2), 0)
          << "h T=" << T << " paired " << paired;
      EXPECT_EQ(std::memcmp(da.y.data(), db.y.data(), da.y.size() * 4), 0)
          << "y T=" << T << " paired " << paired;
    }
  }
}

// The w4a16 contract (qdq_fp4 false, --activation-contract w4a16): h is the BF16 SiLU·up product itself, no
// FP4 QDQ, on unquantized x; it differs from the w4a4 h, and y is down on that h.
TEST(CudaMoeGrouped, W4A16SkipsTheFp4Qdq) {
  REQUIRE_GPU();
  Rng r(2003);
  const int E = 8, I = 256, H = 512, k = 2, T = 5;
  ExpertStacks st = make_expert_stacks(E, I, H, r);
  std::vector<uint16_t> x(static_cast<size_t>(T) * H);
  for (auto& v : x) v = r.bf16(2.0f);
  const std::vector<int> eid = random_choices(T, k, E, r);
  GroupedOut a16 = run_grouped(st, x, eid, T, k, E, I, H, -1, false);
  GroupedOut a4 = run_grouped(st, x, eid, T, k, E, I, H, -1, true);
  ASSERT_EQ(a16.h.size(), static_cast<size_t>(T) * k * I);
  size_t agree = 0, same_as_a4 = 0;
  double num = 0, den = 0;
  std::vector<double> ref(static_cast<size_t>(T) * k * H), absref(ref.size());
  for (int t = 0; t < T; ++t) {
    std::vector<uint16_t> xm(x.begin() + static_cast<long>(t) * H, x.begin() + static_cast<long>(t + 1) * H);
    for (int j = 0; j < k; ++j) {
      const size_t p = static_cast<size_t>(t) * k + j;
      const int e = eid[p];
      std::vector<double> h, ha;
      swiglu_ref(st.gu_dense[static_cast<size_t>(e)], xm, I, H, h, ha);
      for (int i = 0; i < I; ++i) {
        const uint16_t want = f32_to_bf16(static_cast<float>(h[static_cast<size_t>(i)]));
        const uint16_t got = a16.h[p * I + static_cast<size_t>(i)];
        agree += got == want;
        same_as_a4 += got == a4.h[p * I + static_cast<size_t>(i)];
        const double dv = bf16_to_f32(got) - h[static_cast<size_t>(i)];
        num += dv * dv;
        den += h[static_cast<size_t>(i)] * h[static_cast<size_t>(i)];
      }
      const auto& dw = st.dn_dense[static_cast<size_t>(e)];
      for (int row = 0; row < H; ++row) {
        double d = 0, da = 0;
        for (int c = 0; c < I; ++c) {
          const double v = static_cast<double>(bf16_to_f32(dw[static_cast<size_t>(row) * I + c])) *
                           bf16_to_f32(a16.h[p * I + static_cast<size_t>(c)]);
          d += v, da += std::fabs(v);
        }
        ref[p * H + static_cast<size_t>(row)] = d;
        absref[p * H + static_cast<size_t>(row)] = da;
      }
    }
  }
  const double total = static_cast<double>(a16.h.size());
  std::printf(
      "[grouped moe w4a16] h: %zu of %.0f equal to bf16(float64 h), %zu equal to the w4a4 h, rel L2 %.3g\n",
      agree, total, same_as_a4, std::sqrt(num / den));
  EXPECT_GE(static_cast<double>(agree), 0.90 * total);  // misses: a flipped BF16 rounding of g or u
  EXPECT_LT(std::sqrt(num / den), 0.01);
  EXPECT_LT(static_cast<double>(same_as_a4), 0.5 * total) << "w4a16 h looks FP4-QDQ'd";
  expect_close(a16.y, ref, absref, Tol{1e-6, 1.0 / 65536}, "grouped moe w4a16 down");
}

TEST(CudaMoeGrouped, RefusesBadArguments) {
  REQUIRE_GPU();
  Rng r(2001);
  ExpertStacks st = make_expert_stacks(4, 256, 256, r);
  GroupedMoeArgs a;
  a.gate_up = &st.gate_up.m;
  a.down = &st.down.m;
  a.T = 1, a.k = 5, a.E = 4;  // k > E
  int dummy = 0;
  a.eid = &dummy, a.grp = &dummy;
  auto s = grouped_moe(a, nullptr, false);
  EXPECT_FALSE(s.ok());
  a.k = 2;
  s = grouped_moe(a, nullptr, false);  // null x / h / y
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("null"), std::string::npos) << s.message();
  uint16_t b16 = 0;
  float f32 = 0;
  a.x = &b16, a.gu = &f32, a.h = &b16, a.y = &f32;
  a.wide = 1;  // wide items without their permuted-activation scratch
  s = grouped_moe(a, nullptr, false);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(xp)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace gridq::cuda::test

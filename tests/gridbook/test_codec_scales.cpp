// Scale planes (format.md §6, §17.2, §17.6). Legality is recomputed here in double from the E4M3 formula,
// independently of scale_coding.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "core/numerics.h"
#include "gridbook/scale_coding.h"

namespace gridq::gridbook {
namespace {

std::set<double> e4m3_positive_values() {
  std::set<double> s;
  for (int b = 1; b <= 0x7E; ++b) {
    int e = b >> 3, m = b & 7;
    s.insert(e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
  }
  return s;
}

double t_entry(int c) { return (1 + (c % 8) / 8.0) * ((c / 8) ? 2.0 : 1.0); }  // (1 + j/8)·2^i

TEST(CodecScale, TableMatchesDefinition) {
  for (int c = 0; c < 16; ++c)
    EXPECT_EQ(static_cast<double>(kV2Table[static_cast<size_t>(c)]), t_entry(c)) << c;
}

TEST(CodecScale, AllPairsLegality) {
  const std::set<double> e4m3 = e4m3_positive_values();
  ASSERT_EQ(e4m3.size(), 126u);
  int legal = 0, subnormal = 0;
  std::set<double> distinct;
  std::map<int, std::set<int>> per_e;
  for (int E = 0; E < 256; ++E) {
    for (int c = 0; c < 16; ++c) {
      double v = t_entry(c) * std::ldexp(1.0, E - 127);
      bool want = E != 255 && v > 0 && v <= 448 && e4m3.count(v) == 1;
      ASSERT_EQ(v2_legal(static_cast<uint8_t>(E), c), want) << E << "," << c;
      if (!want) continue;
      ++legal;
      distinct.insert(v);
      per_e[E].insert(c);
      if (v < std::ldexp(1.0, -6)) ++subnormal;
      float f = v2_scale(static_cast<uint8_t>(E), c);
      ASSERT_EQ(static_cast<double>(f), v);
      ASSERT_EQ(v2_compose_table()[static_cast<size_t>(E * 16 + c)], f);
      // FP32 multiply gives the same value.
      ASSERT_EQ(kV2Table[static_cast<size_t>(c)] * std::ldexp(1.0f, E - 127), f);
      // The three integer constructions of §6.2.
      ASSERT_EQ(std::bit_cast<uint32_t>(f),
                (static_cast<uint32_t>(E) << 23) + (static_cast<uint32_t>(c) << 20));
      ASSERT_EQ(f32_to_bf16(f), static_cast<uint16_t>(128 * E + 16 * c));
      ASSERT_EQ(bf16_to_f32(static_cast<uint16_t>(128 * E + 16 * c)), f);  // exact in BF16
      if (E + c / 8 >= 121) {
        ASSERT_EQ(f32_to_e4m3_rne(f), 8 * (E - 120) + c) << E << "," << c;
        ASSERT_EQ(e4m3_to_f32(static_cast<uint8_t>(8 * (E - 120) + c)), f);
      }
    }
  }
  EXPECT_EQ(legal, 252);
  EXPECT_EQ(distinct, e4m3);  // the legal scales cover all 126 positive E4M3 values
  EXPECT_EQ(subnormal, 14);
  for (int E = 0; E < 256; ++E) {
    if (E < 117 || E > 135) {
      EXPECT_EQ(per_e.count(E), 0u) << E;
    }
  }
  auto all_but = [](std::set<int> ex) {
    std::set<int> s;
    for (int c = 0; c < 16; ++c)
      if (!ex.count(c)) s.insert(c);
    return s;
  };
  EXPECT_EQ(per_e[117], (std::set<int>{8}));
  EXPECT_EQ(per_e[118], (std::set<int>{0, 8, 12}));
  EXPECT_EQ(per_e[119], (std::set<int>{0, 4, 8, 10, 12, 14}));
  EXPECT_EQ(per_e[120], all_but({1, 3, 5, 7}));
  for (int E = 121; E <= 133; ++E) EXPECT_EQ(per_e[E].size(), 16u) << E;
  EXPECT_EQ(per_e[134], all_but({15}));
  EXPECT_EQ(per_e[135], (std::set<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(v2_legal(122, 16));
  EXPECT_FALSE(v2_legal(122, -1));
}

TEST(CodecScale, PlaneLayoutAndChecks) {
  // Worked example plane (format.md §8): E = 122, byte 0x3B -> g0 = 0xB, g1 = 0x3.
  uint8_t plane[9] = {0x7A, 0x3B, 0, 0, 0, 0, 0, 0, 0};
  V2Plane p = read_v2_plane(plane);
  EXPECT_EQ(p.E, 122);
  EXPECT_EQ(p.c[0], 0xB);
  EXPECT_EQ(p.c[1], 0x3);
  EXPECT_EQ(v2_scale(122, 0xB), 0.0859375f);
  EXPECT_EQ(v2_scale(122, 0x3), 0.04296875f);
  EXPECT_EQ(f32_to_e4m3_rne(v2_scale(122, 0xB)), 0x1B);
  EXPECT_EQ(f32_to_e4m3_rne(v2_scale(122, 0x3)), 0x13);
  EXPECT_EQ(f32_to_bf16(v2_scale(122, 0xB)), 0x3DB0);
  uint8_t back[9];
  write_v2_plane(p, back);
  EXPECT_EQ(std::vector<uint8_t>(back, back + 9), std::vector<uint8_t>(plane, plane + 9));
  EXPECT_TRUE(check_v2_plane(plane, "t").ok());

  // Every pair through the plane check: legal exactly when v2_legal, and the error names the pair.
  for (int E = 0; E < 256; ++E) {
    for (int c = 0; c < 16; ++c) {
      for (int g : {0, 7, 15}) {
        V2Plane q;
        q.E = static_cast<uint8_t>(E);
        int fill = v2_lowest_legal_code(q.E);
        for (auto& x : q.c) x = static_cast<uint8_t>(fill < 0 ? c : fill);
        q.c[static_cast<size_t>(g)] = static_cast<uint8_t>(c);
        uint8_t b[9];
        write_v2_plane(q, b);
        Status st = check_v2_plane(b, "tensor x");
        ASSERT_EQ(st.ok(), v2_legal(q.E, c)) << E << "," << c;
        if (!st.ok()) {
          ASSERT_NE(st.message().find("tensor x"), std::string::npos);
        }
      }
    }
  }

  uint8_t v1[16] = {};
  EXPECT_TRUE(check_v1_plane(v1, "t").ok());
  v1[3] = 0x7E;
  EXPECT_TRUE(check_v1_plane(v1, "t").ok());
  for (uint8_t bad : {uint8_t{0x7F}, uint8_t{0xFF}, uint8_t{0x80}, uint8_t{0x81}, uint8_t{0xFE}}) {
    v1[9] = bad;
    Status st = check_v1_plane(v1, "blk.w");
    EXPECT_FALSE(st.ok()) << int(bad);
    EXPECT_NE(st.message().find("group 9"), std::string::npos);
  }
}

TEST(CodecScale, WriterRules) {
  // All-zero superblock -> E = 118 with all codes 0 (and that plane is legal).
  std::array<float, 16> zero{};
  V2Plane z = v2_plane_round_up(zero);
  EXPECT_EQ(z.E, 118);
  for (uint8_t c : z.c) EXPECT_EQ(c, 0);
  uint8_t b[9];
  write_v2_plane(z, b);
  EXPECT_TRUE(check_v2_plane(b, "z").ok());
  EXPECT_EQ(kV2ZeroSuperblockE, 118);
  EXPECT_EQ(v2_lowest_legal_code(117), 8);
  EXPECT_EQ(v2_lowest_legal_code(120), 0);
  EXPECT_EQ(v2_lowest_legal_code(116), -1);

  // One all-zero group and one tiny group in a superblock with a large maximum.
  std::array<float, 16> ideal{};
  for (size_t g = 0; g < 16; ++g) ideal[g] = 0.5f + 0.1f * static_cast<float>(g);
  ideal[3] = 0.0f;
  ideal[5] = 1e-6f;  // far below the reachable set for this E: snaps up, never clips to something smaller
  V2Plane p = v2_plane_round_up(ideal);
  int lowest = v2_lowest_legal_code(p.E);
  ASSERT_GE(lowest, 0);
  EXPECT_EQ(p.c[3], lowest);
  EXPECT_EQ(p.c[5], lowest);
  for (size_t g = 0; g < 16; ++g) {
    ASSERT_TRUE(v2_legal(p.E, p.c[g]));
    EXPECT_GE(v2_scale(p.E, p.c[g]), ideal[g]) << g;  // never below the ideal scale
    if (p.c[g] != lowest) {                           // and the smallest legal scale that reaches it
      for (int c = 0; c < p.c[g]; ++c) {
        if (v2_legal(p.E, c)) {
          EXPECT_LT(v2_scale(p.E, c), ideal[g]);
        }
      }
    }
  }
  // The chosen E is the smallest that reaches the max; E - 1 cannot.
  float amax = 0.5f + 0.1f * 15;
  EXPECT_LT(v2_scale(static_cast<uint8_t>(p.E - 1), 15), amax);
  // Deterministic.
  V2Plane p2 = v2_plane_round_up(ideal);
  EXPECT_EQ(p2.E, p.E);
  EXPECT_EQ(p2.c, p.c);
  // Above 448 clamps to the largest scale.
  std::array<float, 16> huge{};
  huge[0] = 1e6f;
  V2Plane h = v2_plane_round_up(huge);
  EXPECT_EQ(v2_scale(h.E, h.c[0]), 448.0f);
}

TEST(CodecScale, SnapUpAgainstBruteForce) {
  std::mt19937 rng(3);
  for (int E = 110; E <= 140; ++E) {
    for (int t = 0; t < 200; ++t) {
      float ideal = std::ldexp(static_cast<float>(rng() % 1000) / 250.0f, E - 127);
      int want = -1;
      double best = INFINITY;
      for (int c = 0; c < 16; ++c) {
        double v = t_entry(c) * std::ldexp(1.0, E - 127);
        if (v2_legal(static_cast<uint8_t>(E), c) && v >= ideal && v < best) {
          best = v;
          want = c;
        }
      }
      ASSERT_EQ(v2_snap_up(static_cast<uint8_t>(E), ideal), want) << E << " " << ideal;
    }
  }
}

}  // namespace
}  // namespace gridq::gridbook

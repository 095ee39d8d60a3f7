// KvPlan: the KV-cache arithmetic every backend sizes its cache with, checked against numbers worked out by
// hand for Laguna-S-2.1 (gpu-engine.md §1 idea 4: no GPU needed) and against the refusals the header lists.
#include "runtime/kv_plan.h"

#include <gtest/gtest.h>

namespace gridq::runtime {
namespace {

using model::AttnKind;

model::LayerSpec layer(AttnKind kind, int n_kv_heads, int head_dim, int window) {
  model::LayerSpec L;
  L.attn = kind;
  L.n_heads = 4 * n_kv_heads;
  L.n_kv_heads = n_kv_heads;
  L.head_dim = head_dim;
  L.window = kind == AttnKind::kSliding ? window : 0;
  return L;
}

// Laguna-S-2.1's attention shapes: 48 layers as [full, sliding, sliding, sliding] x 12, 8 KV heads of 128,
// window 512. Only what the KV plan reads is filled in.
model::ModelSpec laguna_s21() {
  model::ModelSpec s;
  s.architecture = "LagunaForCausalLM";
  s.n_layers = 48;
  for (int l = 0; l < 48; ++l)
    s.layers.push_back(layer(l % 4 == 0 ? AttnKind::kFull : AttnKind::kSliding, 8, 128, 512));
  return s;
}

TEST(KvPlan, LagunaS21Shape) {
  auto p = KvPlan::from_spec(laguna_s21(), 16, 16);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->n_full, 12);
  EXPECT_EQ(p->n_sliding, 36);
  EXPECT_EQ(p->kv_elem_bytes, 2);
  // 12 full layers x (K, V) x 8*128 values x 2 bytes = 49152 B = 48 KiB per token.
  EXPECT_EQ(p->full_bytes_per_token, 12 * 2 * 1024 * 2);
  EXPECT_EQ(p->full_bytes_per_token, 48 * 1024);
  EXPECT_EQ(p->page_bytes, 16 * 49152);
  // 36 sliding layers x (K, V) x (512 + 16) slots x 1024 values x 2 bytes = 77,856,768 B per sequence.
  EXPECT_EQ(p->ring_bytes_per_seq, int64_t{36} * 2 * (512 + 16) * 1024 * 2);
  EXPECT_EQ(p->ring_bytes_per_seq, 77856768);
  ASSERT_EQ(p->ring_slots.size(), 36u);
  for (int s : p->ring_slots) EXPECT_EQ(s, 528);
}

TEST(KvPlan, LayerIndicesAndOffsets) {
  auto p = KvPlan::from_spec(laguna_s21(), 16, 16);
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->full_index.size(), 48u);
  ASSERT_EQ(p->ring_index.size(), 48u);
  ASSERT_EQ(p->page_offset.size(), 12u);
  ASSERT_EQ(p->ring_offset.size(), 36u);
  const int64_t kv_page = 16 * 1024 * 2;   // K (or V) of one full layer in one page
  const int64_t kv_ring = 528 * 1024 * 2;  // K (or V) ring of one sliding layer
  for (int l = 0; l < 48; ++l) {
    if (l % 4 == 0) {
      EXPECT_EQ(p->full_index[l], l / 4) << l;
      EXPECT_EQ(p->ring_index[l], -1) << l;
      EXPECT_EQ(p->page_offset[l / 4], (l / 4) * 2 * kv_page) << l;
    } else {
      const int r = l / 4 * 3 + l % 4 - 1;
      EXPECT_EQ(p->full_index[l], -1) << l;
      EXPECT_EQ(p->ring_index[l], r) << l;
      EXPECT_EQ(p->ring_offset[r], r * 2 * kv_ring) << l;
    }
  }
  // The last layer's V ends exactly at the end of the page / the rings.
  EXPECT_EQ(p->page_offset.back() + 2 * kv_page, p->page_bytes);
  EXPECT_EQ(p->ring_offset.back() + 2 * kv_ring, p->ring_bytes_per_seq);
}

TEST(KvPlan, MixedHeadShapesAndWindows) {
  // Per-layer widths and windows: each layer's block is sized by its own n_kv_heads * head_dim.
  model::ModelSpec s;
  s.layers = {layer(AttnKind::kFull, 2, 64, 0), layer(AttnKind::kSliding, 4, 32, 100),
              layer(AttnKind::kFull, 1, 16, 0), layer(AttnKind::kSliding, 1, 8, 7)};
  s.n_layers = 4;
  auto p = KvPlan::from_spec(s, 4, 3);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->page_offset, (std::vector<int64_t>{0, 2 * 4 * 128 * 2}));
  EXPECT_EQ(p->page_bytes, 2 * 4 * 128 * 2 + 2 * 4 * 16 * 2);
  EXPECT_EQ(p->full_bytes_per_token, p->page_bytes / 4);
  EXPECT_EQ(p->full_bytes_per_token, 2 * 128 * 2 + 2 * 16 * 2);
  EXPECT_EQ(p->ring_slots, (std::vector<int>{103, 10}));
  EXPECT_EQ(p->ring_offset, (std::vector<int64_t>{0, 2 * 103 * 128 * 2}));
  EXPECT_EQ(p->ring_bytes_per_seq, 2 * 103 * 128 * 2 + 2 * 10 * 8 * 2);
  EXPECT_EQ(p->full_index, (std::vector<int>{0, -1, 1, -1}));
  EXPECT_EQ(p->ring_index, (std::vector<int>{-1, 0, -1, 1}));
}

TEST(KvPlan, PagesFor) {
  auto p = KvPlan::from_spec(laguna_s21(), 16, 16);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->pages_for(0), 0);
  EXPECT_EQ(p->pages_for(-5), 0);
  EXPECT_EQ(p->pages_for(1), 1);
  EXPECT_EQ(p->pages_for(15), 1);
  EXPECT_EQ(p->pages_for(16), 1);
  EXPECT_EQ(p->pages_for(17), 2);
  EXPECT_EQ(p->pages_for(32), 2);
  EXPECT_EQ(p->pages_for(131072), 8192);
  EXPECT_EQ(p->pages_for(int64_t{1} << 40), (int64_t{1} << 40) / 16);  // no int overflow

  auto one = KvPlan::from_spec(laguna_s21(), 1, 16);
  ASSERT_TRUE(one.ok()) << one.message();
  EXPECT_EQ(one->pages_for(7), 7);

  // Only sliding layers: no pages at all.
  model::ModelSpec s;
  s.layers = {layer(AttnKind::kSliding, 8, 128, 512)};
  s.n_layers = 1;
  auto ring_only = KvPlan::from_spec(s, 16, 16);
  ASSERT_TRUE(ring_only.ok()) << ring_only.message();
  EXPECT_EQ(ring_only->n_full, 0);
  EXPECT_EQ(ring_only->page_bytes, 0);
  EXPECT_EQ(ring_only->full_bytes_per_token, 0);
  EXPECT_EQ(ring_only->pages_for(1000), 0);
}

TEST(KvPlan, CapacitySplitsTheBudget) {
  auto p = KvPlan::from_spec(laguna_s21(), 16, 16);
  ASSERT_TRUE(p.ok()) << p.message();
  const int64_t gib = int64_t{1} << 30;
  auto c = p->capacity(40 * gib, 16);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->ring_pool_bytes, 16 * int64_t{77856768});
  EXPECT_EQ(c->pages, (40 * gib - 16 * int64_t{77856768}) / (16 * 49152));
  EXPECT_EQ(c->tokens, c->pages * 16);
  EXPECT_EQ(c->page_pool_bytes, c->pages * 16 * 49152);
  EXPECT_LE(c->ring_pool_bytes + c->page_pool_bytes, 40 * gib);
  EXPECT_GT(c->ring_pool_bytes + c->page_pool_bytes + p->page_bytes,
            40 * gib);  // nothing a page fits is left

  // Exactly the rings plus one page: one page, 16 tokens.
  auto exact = p->capacity(4 * int64_t{77856768} + 786432, 4);
  ASSERT_TRUE(exact.ok()) << exact.message();
  EXPECT_EQ(exact->pages, 1);
  EXPECT_EQ(exact->tokens, 16);
}

TEST(KvPlan, CapacityRefusals) {
  auto p = KvPlan::from_spec(laguna_s21(), 16, 16);
  ASSERT_TRUE(p.ok()) << p.message();
  // The rings of 4 sequences alone do not fit: the message names both numbers.
  auto rings = p->capacity(4 * int64_t{77856768} - 1, 4);
  ASSERT_FALSE(rings.ok());
  EXPECT_NE(rings.message().find("311427072"), std::string::npos) << rings.message();
  EXPECT_NE(rings.message().find("311427071"), std::string::npos) << rings.message();
  // The rings fit, one byte short of a page after them.
  auto page = p->capacity(4 * int64_t{77856768} + 786431, 4);
  ASSERT_FALSE(page.ok());
  EXPECT_NE(page.message().find("786431"), std::string::npos) << page.message();
  EXPECT_NE(page.message().find("786432"), std::string::npos) << page.message();
  EXPECT_FALSE(p->capacity(int64_t{1} << 40, 0).ok());
  EXPECT_FALSE(p->capacity(-1, 1).ok());
}

TEST(KvPlan, CapacityWithoutFullLayers) {
  model::ModelSpec s;
  s.layers = {layer(AttnKind::kSliding, 1, 8, 4)};
  s.n_layers = 1;
  auto p = KvPlan::from_spec(s, 16, 2);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->ring_bytes_per_seq, 2 * 6 * 8 * 2);
  auto c = p->capacity(2 * p->ring_bytes_per_seq, 2);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->pages, 0);
  EXPECT_EQ(c->tokens, 0);
  EXPECT_EQ(c->ring_pool_bytes, 2 * p->ring_bytes_per_seq);
  EXPECT_FALSE(p->capacity(2 * p->ring_bytes_per_seq - 1, 2).ok());
}

TEST(KvPlan, FromSpecRefusals) {
  const model::ModelSpec good = laguna_s21();
  EXPECT_FALSE(KvPlan::from_spec(good, 0, 16).ok());
  EXPECT_FALSE(KvPlan::from_spec(good, -1, 16).ok());
  EXPECT_FALSE(KvPlan::from_spec(good, 16, 0).ok());
  EXPECT_FALSE(KvPlan::from_spec(model::ModelSpec{}, 16, 16).ok());

  model::ModelSpec bad = good;
  bad.layers[5].n_kv_heads = 0;
  auto e = KvPlan::from_spec(bad, 16, 16);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("layer 5"), std::string::npos) << e.message();
  bad = good;
  bad.layers[4].head_dim = -128;
  EXPECT_FALSE(KvPlan::from_spec(bad, 16, 16).ok());
  bad = good;
  bad.layers[7].window = 0;  // a sliding layer without a window has no bounded ring
  e = KvPlan::from_spec(bad, 16, 16);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("layer 7"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace gridq::runtime

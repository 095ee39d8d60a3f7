// The page pool and prefix cache (runtime/kv_pages.h), then the CPU backend on them: a prefix hit shares the
// full-layer pages, recomputes exactly the receptive field of the stacked sliding windows, and gives the very
// logits of a run without the cache (bit for bit); eviction recycles unreferenced pages LRU; a full pool
// refuses a step without touching any sequence.
#include "runtime/kv_pages.h"

#include <gtest/gtest.h>

#include <cstring>

#include "synthetic_model.h"

namespace gridq::runtime {
namespace {

std::vector<int32_t> seq(int n, int salt) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 5 + salt * 3 + 1) % 29 + 1);
  return v;
}

TEST(PagePool, RefcountsCommitMatchAndLruEviction) {
  PagePool pool(3, 2, 7);
  const auto t = seq(6, 0);
  std::span<const int32_t> ts(t);
  int a = pool.allocate(), b = pool.allocate();
  EXPECT_EQ(pool.used(), 2);
  const uint64_t ha = pool.commit(a, -1, 0, ts.subspan(0, 2));
  pool.commit(b, a, ha, ts.subspan(2, 2));
  pool.unref(b);  // tail released first
  pool.unref(a);
  EXPECT_EQ(pool.used(), 0);
  EXPECT_EQ(pool.cached(), 2);
  EXPECT_EQ(pool.available(), 3);
  // A lookup walks from the first page; it may stop short of max_pages or of the tokens.
  uint64_t h = 0;
  auto m = pool.match(ts, 3, &h);
  EXPECT_EQ(m, (std::vector<int>{a, b}));
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.cached(), 0);
  for (int p : m) pool.unref(p);
  EXPECT_EQ(pool.match(ts, 1, nullptr).size(), 1u);
  pool.unref(a);
  // Another first page: nothing (the chain hash includes the page before).
  auto other = seq(6, 1);
  EXPECT_TRUE(pool.match(std::span<const int32_t>(other), 3, nullptr).empty());
  // Three allocations: the never-used page, then the LRU cached page (b, released before a).
  int c = pool.allocate();
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.allocate(), b);
  EXPECT_EQ(pool.evictions(), 1);
  EXPECT_FALSE(pool.registered(b));
  EXPECT_EQ(pool.match(ts, 3, nullptr), std::vector<int>{a});  // a's entry survives; b's is gone
  EXPECT_EQ(pool.allocate(), -1);                              // all three referenced now
}

TEST(PagePool, RecycledParentIsNotTrustedAndCachingOffDropsEverything) {
  PagePool pool(2, 2, 7);
  const auto t = seq(4, 0);
  std::span<const int32_t> ts(t);
  int a = pool.allocate(), b = pool.allocate();
  const uint64_t ha = pool.commit(a, -1, 0, ts.subspan(0, 2));
  pool.commit(b, a, ha, ts.subspan(2, 2));
  pool.unref(a);  // a cached, b still held
  // a is evicted and reallocated with the same tokens (same hash): b's recorded parent generation is stale.
  int a2 = pool.allocate();
  EXPECT_EQ(a2, a);
  pool.commit(a2, -1, 0, ts.subspan(0, 2));
  auto m = pool.match(ts, 2, nullptr);
  EXPECT_EQ(m, std::vector<int>{a});  // b is not returned after a page whose generation changed
  for (int p : m) pool.unref(p);
  pool.set_caching(false);
  EXPECT_TRUE(pool.match(ts, 2, nullptr).empty());
  pool.unref(a2);
  pool.unref(b);
  EXPECT_EQ(pool.cached(), 0);
  EXPECT_EQ(pool.available(), 2);
}

// Full, sliding, sliding, full (Laguna's pattern): the two windows of 4 give a receptive field of 6.
testing::SyntheticModel hybrid(int64_t pages) {
  testing::SynthModelOptions o;
  o.layers = 4;
  o.layer_types = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  o.mlp_types = {"dense", "sparse", "sparse", "sparse"};
  o.window = 4;
  o.vocab = 32;
  testing::SyntheticModel m;
  m.store = std::make_shared<testing::TensorStore>();
  testing::fill_synthetic(*m.store, o);
  auto a = model::adapt(testing::synthetic_config(o), m.store->table);
  EXPECT_TRUE(a.ok()) << a.message();
  auto w = build_model_weights(a->spec, a->weights);
  EXPECT_TRUE(w.ok()) << w.message();
  cpu::CpuOptions co;
  co.kv_pages = pages;
  co.page_tokens = 4;
  auto be = cpu::CpuBackend::create(a->spec, std::move(*w), m.store, co);
  EXPECT_TRUE(be.ok()) << be.message();
  m.engine = Engine::from_backend(std::move(*be), {});
  return m;
}

// Logits of every position of `ids` from `from` on (prefilled in chunks of 5), then of 4 greedy decodes.
std::vector<float> run(Engine& e, SeqId s, const std::vector<int32_t>& ids, size_t from) {
  std::vector<float> out;
  for (size_t p = from; p < ids.size(); p += 5) {
    const size_t n = std::min<size_t>(5, ids.size() - p);
    BatchItem it{s, std::span<const int32_t>(ids).subspan(p, n), LogitsMode::kAll};
    auto lg = e.forward(std::span<const BatchItem>(&it, 1));
    EXPECT_TRUE(lg.ok()) << lg.message();
    if (!lg.ok()) return out;
    out.insert(out.end(), lg->begin(), lg->end());
  }
  for (int k = 0; k < 4; ++k) {
    const float* last = out.data() + out.size() - 32;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + 32) - last);
    auto lg = e.decode(std::vector<SeqId>{s}, std::vector<int32_t>{next});
    EXPECT_TRUE(lg.ok());
    out.insert(out.end(), lg->begin(), lg->end());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CpuPrefixCache, HitRecomputesTheReceptiveFieldAndMatchesBitForBit) {
  auto m = hybrid(64);
  ASSERT_TRUE(m.engine);
  Backend& be = m.engine->backend();
  ASSERT_TRUE(be.supports_prefix_caching());
  ASSERT_TRUE(be.set_prefix_caching(true).ok());
  const auto ids = seq(30, 0);
  // The reference: no cache involved (the first sequence finds nothing).
  SeqId a = m.engine->create_sequence();
  auto miss = be.attach_prefix(a, ids);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->cached, 0);
  auto ref = run(*m.engine, a, ids, 0);
  const int64_t held = be.kv_pages().used;
  EXPECT_EQ(held, 9);  // 30 + 4 positions in pages of 4
  // A second sequence of the same prompt while the first is alive: it shares 7 pages (28 tokens, leaving
  // positions 28 and 29 to compute) and recomputes from 28 − 2·(4 − 1) = 22.
  SeqId b = m.engine->create_sequence();
  auto hit = be.attach_prefix(b, ids);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->cached, 28);
  EXPECT_EQ(hit->resume, 22);
  EXPECT_EQ(m.engine->sequence_length(b), 22);
  EXPECT_EQ(be.kv_pages().used, held);  // shared, not copied
  auto got = run(*m.engine, b, ids, 22);
  // Rows 22..27 only rebuild the rings (their own logits are not meaningful); from position 28 on, and
  // through the 4 decodes, every logit equals the reference.
  ASSERT_EQ(got.size(), (8u + 4u) * 32u);
  EXPECT_TRUE(same_bits(std::vector<float>(got.begin() + 6 * 32, got.end()),
                        std::vector<float>(ref.begin() + 28 * 32, ref.end())))
      << "prefix-cache hit changed the logits";
  EXPECT_EQ(be.kv_pages().used, held + 2);  // b's own pages: positions 28..33
  m.engine->free_sequence(a);
  m.engine->free_sequence(b);
  EXPECT_EQ(be.kv_pages().used, 0);
  EXPECT_GT(be.kv_pages().cached, 0);
}

TEST(CpuPrefixCache, EvictionRecyclesCachedPagesAndAFullPoolRefusesCleanly) {
  auto m = hybrid(8);  // 32 positions
  ASSERT_TRUE(m.engine);
  Backend& be = m.engine->backend();
  ASSERT_TRUE(be.set_prefix_caching(true).ok());
  const auto first = seq(28, 1), second = seq(28, 2);
  SeqId a = m.engine->create_sequence();
  ASSERT_TRUE(m.engine->prefill(a, first, LogitsMode::kNone).ok());
  m.engine->free_sequence(a);
  EXPECT_EQ(be.kv_pages().cached, 7);
  EXPECT_EQ(be.kv_pages().free(), 8);
  // Another prompt needs 7 pages: the never-used one, then 6 evicted (least recently used first).
  SeqId b = m.engine->create_sequence();
  auto ref_b = m.engine->prefill(b, second, LogitsMode::kAll);
  ASSERT_TRUE(ref_b.ok());
  EXPECT_EQ(be.kv_pages().used, 7);
  EXPECT_EQ(be.kv_pages().cached, 1);  // the first prompt's head page survives (its tail went first)
  SeqId c = m.engine->create_sequence();
  auto hit = be.attach_prefix(c, first);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->cached, 4);
  EXPECT_EQ(hit->resume, 0);
  // c needs 6 more pages for the rest of its prompt: only 0 are free. Refused, nothing changed.
  BatchItem it{c, std::span<const int32_t>(first), LogitsMode::kLast};
  std::vector<float> lg;
  Status st = be.forward(std::span<const BatchItem>(&it, 1), lg);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("KV cache is full"), std::string::npos) << st.message();
  EXPECT_EQ(m.engine->sequence_length(c), 0);
  EXPECT_EQ(be.kv_pages_needed(c, 28), 6);
  // b leaves: c now fits, and its logits equal b's reference for the same prompt run without a hit.
  m.engine->free_sequence(b);
  SeqId d = m.engine->create_sequence();
  auto hd = be.attach_prefix(d, second);
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(hd->cached, 24);
  EXPECT_EQ(hd->resume, 18);
  m.engine->free_sequence(c);
  BatchItem itd{d, std::span<const int32_t>(second).subspan(18), LogitsMode::kAll};
  std::vector<float> got;
  ASSERT_TRUE(be.forward(std::span<const BatchItem>(&itd, 1), got).ok());
  ASSERT_EQ(got.size(), 10u * 32u);
  EXPECT_TRUE(same_bits(std::vector<float>(got.begin() + 6 * 32, got.end()),
                        std::vector<float>(ref_b->begin() + 24 * 32, ref_b->end())));
  m.engine->free_sequence(d);
}

}  // namespace
}  // namespace gridq::runtime

// Sliding-window ring (laguna.md §1.3 step 4): query i sees keys j with i - W < j <= i. With a model of
// sliding layers only, a token exactly W positions back must not influence the logits, one W-1 back must;
// chunked prefill (chunks smaller and larger than W) and decode through the ring must equal one forward.
#include <gtest/gtest.h>

#include "parity_util.h"
#include "synthetic_model.h"

namespace gridq::runtime {
namespace {

testing::SynthModelOptions sliding_only() {
  testing::SynthModelOptions o;
  o.layers = 2;
  o.layer_types = {"sliding_attention", "sliding_attention"};
  o.mlp_types = {"dense", "sparse"};
  o.window = 4;
  o.vocab = 32;
  return o;
}

std::vector<float> last_logits(Engine& e, const std::vector<int32_t>& ids) {
  auto s = e.create_sequence();
  auto lg = e.prefill(s, ids, LogitsMode::kLast);
  e.free_sequence(s);
  EXPECT_TRUE(lg.ok()) << lg.message();
  return lg.ok() ? *lg : std::vector<float>{};
}

TEST(SlidingWindow, KeysOutsideWindowAreInvisible) {
  auto o = sliding_only();
  auto m = testing::make_synthetic(o);
  ASSERT_TRUE(m.engine);
  // Two stacked sliding layers widen the receptive field to 2(W-1): position p depends on p-6..p.
  std::vector<int32_t> base = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const size_t p = base.size() - 1;
  const size_t reach = 2 * static_cast<size_t>(o.window - 1);
  auto ref = last_logits(*m.engine, base);
  auto outside = base;
  outside[p - reach - 1] = 20;  // beyond the receptive field
  auto inside = base;
  inside[p - reach] = 20;  // at its edge
  auto lo = last_logits(*m.engine, outside), li = last_logits(*m.engine, inside);
  double d_out = 0, d_in = 0;
  for (size_t v = 0; v < ref.size(); ++v) {
    d_out = std::max(d_out, static_cast<double>(std::abs(lo[v] - ref[v])));
    d_in = std::max(d_in, static_cast<double>(std::abs(li[v] - ref[v])));
  }
  EXPECT_EQ(d_out, 0.0);
  EXPECT_GT(d_in, 1e-4);
}

TEST(SlidingWindow, ChunkedAndDecodeMatchOneForward) {
  auto o = sliding_only();
  auto m = testing::make_synthetic(o);
  ASSERT_TRUE(m.engine);
  std::vector<int32_t> ids;
  for (int i = 0; i < 23; ++i) ids.push_back((i * 7 + 3) % o.vocab);
  auto s = m.engine->create_sequence();
  auto full = m.engine->prefill(s, ids, LogitsMode::kAll);
  ASSERT_TRUE(full.ok());
  m.engine->free_sequence(s);
  for (int chunk : {1, 3, 4, 6, 9}) {
    auto s2 = m.engine->create_sequence();
    std::vector<float> all;
    for (size_t p = 0; p < ids.size(); p += static_cast<size_t>(chunk)) {
      const size_t n = std::min(static_cast<size_t>(chunk), ids.size() - p);
      BatchItem it{s2, std::span<const int32_t>(ids).subspan(p, n), LogitsMode::kAll};
      auto lg = m.engine->forward(std::span<const BatchItem>(&it, 1));
      ASSERT_TRUE(lg.ok());
      all.insert(all.end(), lg->begin(), lg->end());
    }
    m.engine->free_sequence(s2);
    auto c = testing::compare_logits(full->data(), all.data(), static_cast<int64_t>(ids.size()), o.vocab);
    EXPECT_LT(c.max_abs, 1e-5) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace gridq::runtime

// The attention split buffer's sizing (attn_splits.h) and the step rows a token budget gives
// (forward_kernels.h step_rows_for): host code, runs without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/cuda/attn_splits.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/synthetic_model.h"
#include "runtime/kv_plan.h"

namespace gridq::cuda::test {
namespace {

using detail::attn_row_splits;
using detail::kAttnSplitKeys;
using detail::kMaxSliceRows;

int splits_of(int64_t tokens) { return static_cast<int>((tokens + kAttnSplitKeys - 1) / kAttnSplitKeys); }

// --max-num-batched-tokens → rows of one step: 0 is the default; a decode graph's rows at least (a step of
// up to kMaxSliceRows sequences must fit one step); the build's bound at most.
TEST(AttnSplits, StepRowsOfATokenBudget) {
  using detail::kDefaultStepRows;
  using detail::kMaxStepRows;
  using detail::step_rows_for;
  EXPECT_EQ(step_rows_for(0), kDefaultStepRows);
  EXPECT_EQ(step_rows_for(-5), kDefaultStepRows);
  EXPECT_EQ(step_rows_for(1), kMaxSliceRows);
  EXPECT_EQ(step_rows_for(kMaxSliceRows + 1), kMaxSliceRows + 1);
  EXPECT_EQ(step_rows_for(2048), 2048);
  EXPECT_EQ(step_rows_for(kMaxStepRows), kMaxStepRows);
  EXPECT_EQ(step_rows_for(int64_t{1} << 40), kMaxStepRows);
  EXPECT_LE(kDefaultStepRows, kMaxStepRows);
  EXPECT_GE(kDefaultStepRows, kMaxSliceRows);
}

TEST(AttnSplits, LayerBoundCoversEveryRow) {
  // A row at pos of a sequence of pos + 1 tokens reads attn_row_splits; the bound for a context of that
  // sequence's splits must cover it, on full and sliding layers of several windows.
  for (int window : {0, 1, 64, 255, 256, 257, 512, 4096})
    for (int pos = 0; pos < 6000; ++pos)
      ASSERT_LE(attn_row_splits(window, pos), layer_attn_splits(window, splits_of(pos + 1)))
          << "window " << window << " pos " << pos;
  EXPECT_EQ(layer_attn_splits(512, 4096), 3);
  EXPECT_EQ(layer_attn_splits(512, 2), 2);
  EXPECT_EQ(layer_attn_splits(0, 4096), 4096);
}

TEST(AttnSplits, LagunaS21SlotsFollowTheFullLayers) {
  auto spec = synthetic_spec("laguna-s-2.1");
  ASSERT_TRUE(spec) << spec.message();
  // Full layers: 48 heads × ctx splits; sliding: 72 heads × 3 (window 512).
  EXPECT_EQ(attn_split_slots(*spec, 4096), int64_t{kMaxSliceRows} * 48 * 4096);
  EXPECT_EQ(attn_split_slots(*spec, 3), int64_t{kMaxSliceRows} * 72 * 3);
  EXPECT_EQ(attn_split_slots(*spec, 2), int64_t{kMaxSliceRows} * 72 * 2);
  EXPECT_EQ(attn_split_slot_bytes(*spec), (128 + 2) * 4);
}

TEST(AttnSplits, ContextFitsWhatThePoolHolds) {
  auto spec = synthetic_spec("laguna-s-2.1");
  ASSERT_TRUE(spec) << spec.message();
  auto plan = runtime::KvPlan::from_spec(*spec, 16, detail::kAttnSliceRows);
  ASSERT_TRUE(plan) << plan.message();
  const int seqs = 64;
  const auto kv_tokens = [&](int64_t b) -> int64_t {
    auto c = plan->capacity(b, seqs);
    return c ? c->tokens : 0;
  };
  const auto bytes = [&](int n) { return attn_split_slots(*spec, n) * attn_split_slot_bytes(*spec); };
  const int64_t max_len = 1048576;
  // A budget whose pool holds far fewer than max_len tokens: the buffer covers the pool, and only just.
  const int64_t budget = int64_t{30} << 30;
  const int n = attn_ctx_splits(max_len, budget, kv_tokens, bytes);
  EXPECT_LT(n, splits_of(max_len));
  EXPECT_GE(int64_t{n} * kAttnSplitKeys, kv_tokens(budget - bytes(n)));
  EXPECT_LT(int64_t{n - 1} * kAttnSplitKeys, kv_tokens(budget - bytes(n - 1)));
  EXPECT_LT(bytes(n), bytes(splits_of(max_len)) / 2);
  EXPECT_GT(kv_tokens(budget - bytes(n)), kv_tokens(budget - bytes(splits_of(max_len))));
  // A budget that holds max_len beside the whole buffer: every split of max_len.
  EXPECT_EQ(attn_ctx_splits(32768, budget, kv_tokens, bytes), splits_of(32768));
  // No KV at all (a budget below the rings): the smallest buffer, and the pool's own check fails later.
  EXPECT_EQ(attn_ctx_splits(max_len, 1 << 20, kv_tokens, bytes), 1);
}

// Fused attention slices: a full layer's are kAttnFusedSliceRows; a sliding layer's make one round of (tile,
// KV head) items on the CTAs, within [kMaxSliceRows, kAttnSliceRows].
TEST(AttnSplits, FusedSliceRows) {
  using detail::kAttnFusedSliceRows;
  using detail::kAttnSliceRows;
  EXPECT_EQ(attn_fused_slice_rows(0, 6, 8, 8, 132), kAttnFusedSliceRows);
  EXPECT_EQ(attn_fused_slice_rows(512, 9, 8, 8, 132), 227);  // 16 tiles of 128 pairs a KV head: 128 items
  EXPECT_EQ((227 * 9 + 127) / 128 * 8, 128);
  EXPECT_EQ(attn_fused_slice_rows(512, 9, 8, 8, 100000), kAttnSliceRows);
  EXPECT_EQ(attn_fused_slice_rows(512, 16, 8, 1, 8), kMaxSliceRows);
}

}  // namespace
}  // namespace gridq::cuda::test

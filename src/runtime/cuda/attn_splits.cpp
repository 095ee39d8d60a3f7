#include "runtime/cuda/attn_splits.h"

#include <algorithm>

#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda {

int attn_splits_for(int64_t tokens) {
  return static_cast<int>(
      std::max<int64_t>(1, (tokens + detail::kAttnSplitKeys - 1) / detail::kAttnSplitKeys));
}

int layer_attn_splits(int window, int ctx_splits) {
  if (window <= 0) return ctx_splits;
  const int w = (window - 1 + detail::kAttnSplitKeys - 1) / detail::kAttnSplitKeys + 1;
  return std::min(ctx_splits, w);
}

int64_t attn_split_slots(const model::ModelSpec& s, int ctx_splits) {
  int64_t most = 1;
  for (const auto& L : s.layers) {
    const int window = L.attn == model::AttnKind::kSliding ? L.window : 0;
    most = std::max(most, static_cast<int64_t>(L.n_heads) * layer_attn_splits(window, ctx_splits));
  }
  return most * detail::kMaxSliceRows;
}

int64_t attn_split_slot_bytes(const model::ModelSpec& s) {
  int d = 1;
  for (const auto& L : s.layers) d = std::max(d, L.head_dim);
  return static_cast<int64_t>(d + 2) * 4;
}

int attn_ctx_splits(int64_t max_len, int64_t budget, const std::function<int64_t(int64_t)>& kv_tokens,
                    const std::function<int64_t(int)>& buffer_bytes) {
  const int all = attn_splits_for(max_len);
  if (kv_tokens(budget - buffer_bytes(all)) >= max_len) return all;
  // Covered: the buffer for n splits leaves KV for at most n splits' tokens. kv_tokens falls as n grows, so
  // the smallest covered n is found by bisection; `all` is covered (its KV holds fewer than max_len tokens).
  const auto covered = [&](int n) { return attn_splits_for(kv_tokens(budget - buffer_bytes(n))) <= n; };
  int lo = 1, hi = all;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (covered(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

int attn_fused_slice_rows(int window, int g, int nkv, int tile_warps, int ctas) {
  if (window <= 0) return detail::kAttnFusedSliceRows;
  const int rows = std::max(1, ctas / std::max(1, nkv)) * 16 * tile_warps / std::max(1, g);
  return std::clamp(rows, detail::kMaxSliceRows, detail::kAttnSliceRows);
}

}  // namespace gridq::cuda

// The attention split buffer (Work::partial): how many (row, head, split) slots a model needs, and how long a
// context the serving memory budget lets it hold. Plain host code (tested without a GPU).
#pragma once

#include <cstdint>
#include <functional>

#include "model/model_spec.h"

namespace gridq::cuda {

// Splits of kAttnSplitKeys keys that `tokens` positions span (at least 1).
int attn_splits_for(int64_t tokens);

// Splits a row of a layer reads at most when no row is past `ctx_splits` splits of keys: a sliding layer's
// rows read their window's splits (⌈(window − 1) / kAttnSplitKeys⌉ + 1 at any position), a full layer's
// up to `ctx_splits`.
int layer_attn_splits(int window, int ctx_splits);

// (row, head, split) slots for a decode slice of kMaxSliceRows rows at every layer: the most any layer's
// n_heads × layer_attn_splits needs. A prefill slice is cut to fit them (fwd::attention).
int64_t attn_split_slots(const model::ModelSpec& s, int ctx_splits);

// Bytes of one slot: the split's d + 2 floats (max, sum, output) at the widest head.
int64_t attn_split_slot_bytes(const model::ModelSpec& s);

// The context (in splits) to size the buffer for, given `budget` bytes shared by the buffer and the KV pages
// and `kv_tokens(bytes)` the tokens of KV pages that `bytes` hold (0 for a negative budget): every split of
// max_len when the rest still holds max_len tokens of KV, else the fewest splits that cover what the KV left
// beside them can hold (no sequence is ever longer than the KV pool). Only for models with full layers (else
// the pool bounds nothing). `buffer_bytes(splits)` is the buffer's size for a context of that many splits.
int attn_ctx_splits(int64_t max_len, int64_t budget, const std::function<int64_t(int64_t)>& kv_tokens,
                    const std::function<int64_t(int)>& buffer_bytes);

// Rows of one fused attention slice (AttnArgs::fused) of a layer: a full layer's kAttnFusedSliceRows; a
// sliding layer's as many as make one round of (tile, KV head) items on `ctas` resident CTAs (tiles of
// 16·tile_warps (row, head) pairs, g heads a KV head), between kMaxSliceRows and the rings' kAttnSliceRows:
// past one round, a second round of a few items doubles the slice's time (Laguna-S-2.1 on 132 SMs: 256
// rows are 144 items, 227 rows 128).
int attn_fused_slice_rows(int window, int g, int nkv, int tile_warps, int ctas);

}  // namespace gridq::cuda

// KV-cache arithmetic for any backend, from the ModelSpec alone (gpu-engine.md §1 idea 4: no GPU needed, so
// CI tests it). Full-attention layers keep K and V in fixed-size pages shared by all full layers (one page
// table per sequence serves every full layer); sliding-window layers keep a ring per sequence.
//
// Ring slots: a sliding layer's ring holds `window + chunk` positions, not `window`. A step appends up to
// `chunk` keys before its queries read the window, so the ring needs room for the new keys without
// overwriting keys that earlier queries of the same step still see (position p lives in slot p % slots).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"

namespace gridq::runtime {

struct KvPlan {
  int page_tokens = 16;              // tokens per page of the full layers
  int chunk_tokens = 16;             // most tokens one step appends to a sequence
  int kv_elem_bytes = 2;             // BF16 K and V
  std::vector<int> full_index;       // [n_layers] index among the full layers, -1 for sliding layers
  std::vector<int> ring_index;       // [n_layers] index among the sliding layers, -1 for full layers
  std::vector<int64_t> page_offset;  // [n_full] byte offset of layer's K inside one page; V follows K
  std::vector<int64_t> ring_offset;  // [n_sliding] byte offset of layer's K ring inside a sequence's rings
  std::vector<int> ring_slots;       // [n_sliding] window + chunk_tokens
  int n_full = 0, n_sliding = 0;
  int64_t page_bytes = 0;          // one page across every full layer, K and V
  int64_t ring_bytes_per_seq = 0;  // every sliding layer's ring of one sequence, K and V
  int64_t full_bytes_per_token =
      0;  // K+V bytes one token adds over all full layers (= page_bytes / page_tokens)

  // Refuses page_tokens or chunk_tokens < 1, a spec without layers, and head shapes <= 0 (and, like the CPU
  // backend, a sliding layer without a window: it has no bounded ring).
  static Expected<KvPlan> from_spec(const model::ModelSpec& spec, int page_tokens, int chunk_tokens);

  // Pages a sequence of `tokens` positions occupies (0 without full layers).
  int64_t pages_for(int64_t tokens) const;

  struct Capacity {
    int64_t pages = 0;            // pages of the full-layer pool
    int64_t tokens = 0;           // pages · page_tokens: KV tokens that fit (over all sequences)
    int64_t page_pool_bytes = 0;  // pages · page_bytes
    int64_t ring_pool_bytes = 0;  // max_seqs · ring_bytes_per_seq
  };
  // Splits `budget_bytes` (free device memory for KV) between the rings of `max_seqs` sequences and the page
  // pool. Fails (naming both numbers) when the rings alone do not fit or not one page is left, and for
  // max_seqs < 1 or a negative budget. Without full layers there is no pool: pages and tokens stay 0.
  Expected<Capacity> capacity(int64_t budget_bytes, int max_seqs) const;
};

}  // namespace gridq::runtime

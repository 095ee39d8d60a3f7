#include "runtime/kv_plan.h"

#include <limits>

namespace gridq::runtime {

Expected<KvPlan> KvPlan::from_spec(const model::ModelSpec& spec, int page_tokens, int chunk_tokens) {
  if (page_tokens < 1) return err("kv plan: page_tokens must be >= 1 (got {})", page_tokens);
  if (chunk_tokens < 1) return err("kv plan: chunk_tokens must be >= 1 (got {})", chunk_tokens);
  if (spec.layers.empty()) return err("kv plan: the model spec has no layers");
  KvPlan p;
  p.page_tokens = page_tokens;
  p.chunk_tokens = chunk_tokens;
  const int64_t elem = p.kv_elem_bytes;
  const int n_layers = static_cast<int>(spec.layers.size());
  p.full_index.assign(static_cast<size_t>(n_layers), -1);
  p.ring_index.assign(static_cast<size_t>(n_layers), -1);
  for (int l = 0; l < n_layers; ++l) {
    const model::LayerSpec& L = spec.layers[static_cast<size_t>(l)];
    if (L.n_kv_heads <= 0 || L.head_dim <= 0)
      return err("kv plan: layer {} has n_kv_heads {} and head_dim {} (both must be > 0)", l, L.n_kv_heads,
                 L.head_dim);
    const int64_t kv_width = static_cast<int64_t>(L.n_kv_heads) * L.head_dim;  // K (or V) values per token
    if (L.attn == model::AttnKind::kFull) {
      p.full_index[static_cast<size_t>(l)] = p.n_full++;
      // One page holds page_tokens positions of every full layer: [K | V] per layer, layers in order.
      p.page_offset.push_back(p.page_bytes);
      p.page_bytes += kv_width * page_tokens * 2 * elem;
      continue;
    }
    // The same rule as the CPU backend: an unwindowed sliding layer has no bounded ring to live in.
    if (L.window <= 0) return err("kv plan: layer {} is a sliding layer without a window ({})", l, L.window);
    const int64_t slots = static_cast<int64_t>(L.window) + chunk_tokens;
    if (slots > std::numeric_limits<int>::max())
      return err("kv plan: layer {}: window {} + chunk_tokens {} ring slots overflow int", l, L.window,
                 chunk_tokens);
    p.ring_index[static_cast<size_t>(l)] = p.n_sliding++;
    p.ring_slots.push_back(static_cast<int>(slots));
    // A sequence's rings: [K ring | V ring] per sliding layer, layers in order.
    p.ring_offset.push_back(p.ring_bytes_per_seq);
    p.ring_bytes_per_seq += kv_width * slots * 2 * elem;
  }
  p.full_bytes_per_token = p.page_bytes / page_tokens;
  return p;
}

int64_t KvPlan::pages_for(int64_t tokens) const {
  if (n_full == 0 || tokens <= 0) return 0;
  return (tokens + page_tokens - 1) / page_tokens;
}

Expected<KvPlan::Capacity> KvPlan::capacity(int64_t budget_bytes, int max_seqs) const {
  if (max_seqs < 1) return err("kv plan: max_seqs must be >= 1 (got {})", max_seqs);
  if (budget_bytes < 0) return err("kv plan: KV budget {} bytes is negative", budget_bytes);
  Capacity c;
  c.ring_pool_bytes = static_cast<int64_t>(max_seqs) * ring_bytes_per_seq;
  if (c.ring_pool_bytes > budget_bytes)
    return err(
        "kv plan: the sliding-window rings of {} sequences need {} bytes ({} per sequence) but the KV budget "
        "is {} bytes; lower max_num_seqs or raise gpu_memory_utilization",
        max_seqs, c.ring_pool_bytes, ring_bytes_per_seq, budget_bytes);
  // Without full layers there is no page pool: every sequence's KV is its rings, so max_seqs alone bounds
  // admission and pages/tokens stay 0.
  if (n_full == 0) return c;
  const int64_t left = budget_bytes - c.ring_pool_bytes;
  c.pages = left / page_bytes;
  if (c.pages < 1)
    return err(
        "kv plan: after the rings of {} sequences ({} bytes) the KV budget of {} bytes leaves {} bytes, less "
        "than one page of {} bytes; lower max_num_seqs or raise gpu_memory_utilization",
        max_seqs, c.ring_pool_bytes, budget_bytes, left, page_bytes);
  c.tokens = c.pages * page_tokens;
  c.page_pool_bytes = c.pages * page_bytes;
  return c;
}

}  // namespace gridq::runtime

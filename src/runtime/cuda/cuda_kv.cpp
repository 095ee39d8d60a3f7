// CudaBackend's KV bookkeeping on the host (cuda_backend.h): sequence slots, the page pool (refcounts and
// free list, runtime/kv_pages.h), each slot's row of the device page table, and the page accounting the
// scheduler admits and preempts by, and prefix caching: a hit shares the matched pages (their ids copied into
// the slot's page-table row) and the forward skips the full-layer KV writes of the rows below the floor
// (RowInfo::kv_write), which it recomputes only to rebuild the sliding-layer rings (docs/serving.md), from a
// ring snapshot's boundary when one matches (cuda_snapshots.cpp).
#include <algorithm>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"

namespace gridq::cuda {

runtime::KvPageStats CudaBackend::kv_pages() const {
  runtime::KvPageStats k;
  k.page_tokens = plan_.page_tokens;
  k.total = pool_.total();
  k.used = pool_.used();
  k.cached = pool_.cached();
  return k;
}

int64_t CudaBackend::kv_pages_needed(runtime::SeqId id, int64_t new_len) const {
  auto it = seqs_.find(id);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
  return std::max<int64_t>(0, plan_.pages_for(new_len) - have);
}

Status CudaBackend::add_sequence(runtime::SeqId id) {
  if (seqs_.count(id)) return err("cuda backend: sequence {} already exists", id);
  if (free_slots_.empty())
    return err("cuda backend: all {} sequence slots hold KV (--max-num-seqs {})", max_seqs_, max_seqs_);
  Seq s;
  s.slot = free_slots_.back();
  free_slots_.pop_back();
  seqs_.emplace(id, std::move(s));
  return {};
}

void CudaBackend::remove_sequence(runtime::SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // The end of an answer (or of a preempted sequence): a snapshot for the next turn. Best effort: a failed
  // copy only costs a later hit its recompute, and a sticky CUDA error fails the next step anyway.
  (void)save_snapshot(it->second);
  // Last page first (the prefix cache's LRU order, once the backend has one).
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p) pool_.unref(*p);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
}

int64_t CudaBackend::sequence_length(runtime::SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.len;
}

Status CudaBackend::ensure_pages(runtime::SeqId id, Seq& s, int64_t new_len) {
  if (new_len > max_len_)
    return err("cuda backend: sequence {} would reach {} tokens, past max_model_len {}", id, new_len,
               max_len_);
  const size_t have = s.pages.size(), need = static_cast<size_t>(plan_.pages_for(new_len));
  if (need <= have) return {};
  if (static_cast<int64_t>(need - have) > pool_.available())
    return err("cuda backend: the KV cache is full ({} of {} pages of {} tokens in use)", pool_.used(),
               pool_.total(), plan_.page_tokens);
  while (s.pages.size() < need) s.pages.push_back(pool_.allocate());  // cannot fail: counted above
  // The slot's row of the device page table is s.pages: copy the new entries (synchronously: the step that
  // reads them comes next on the same stream, and the host vector may grow again before a later copy).
  const size_t at = static_cast<size_t>(s.slot) * max_pages_per_seq_ + have;
  GRIDQ_CUDA(cudaMemcpyAsync(page_table_.as<int>() + at, s.pages.data() + have, (need - have) * 4,
                             cudaMemcpyHostToDevice, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  return {};
}

Status CudaBackend::set_length_for_bench(runtime::SeqId id, int64_t len) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return err("cuda backend: unknown sequence {}", id);
  GRIDQ_RETURN_IF_ERROR(ensure_pages(id, it->second, len));
  it->second.len = len;
  it->second.no_history = true;  // its KV is whatever the pages hold: never a prefix-cache entry
  it->second.hist.clear();
  return {};
}

Status CudaBackend::set_prefix_caching(bool on) {
  pool_.set_caching(on);
  return {};
}

Expected<runtime::PrefixHit> CudaBackend::attach_prefix(runtime::SeqId id, std::span<const int32_t> tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return err("cuda backend: attach_prefix on unknown sequence {}", id);
  Seq& s = it->second;
  if (s.len != 0 || !s.pages.empty())
    return err("cuda backend: attach_prefix on sequence {} that already holds {} tokens", id, s.len);
  runtime::PrefixHit hit;
  if (tokens.size() < 2 || plan_.n_full == 0) return hit;
  const int P = plan_.page_tokens;
  const int64_t max_pages =
      std::min<int64_t>(static_cast<int64_t>(tokens.size() - 1) / P, max_pages_per_seq_);
  s.pages = pool_.match(tokens, max_pages, &s.chain);
  s.committed = s.pages.size();
  hit = runtime::prefix_hit(s.pages.size(), P, reach_);
  // A ring snapshot at a boundary past the recompute's start lets the sequence start there instead.
  if (hit.resume < hit.cached) {
    GRIDQ_ASSIGN_OR_RETURN(const int64_t restored, restore_snapshot(s, tokens, s.pages.size(), hit.resume));
    if (restored > 0) {
      hit.resume = restored;
    } else if (!snap_.empty()) {
      s.snap_at = hit.cached;  // run_items saves one when the recompute gets there
      s.snap_hash = s.chain;
    }
  }
  s.floor = hit.cached;
  s.len = hit.resume;
  s.hist.assign(tokens.begin(), tokens.begin() + hit.resume);
  if (!s.pages.empty()) {  // the slot's page-table row starts with the shared pages
    GRIDQ_CUDA(cudaMemcpyAsync(page_table_.as<int>() + static_cast<size_t>(s.slot) * max_pages_per_seq_,
                               s.pages.data(), s.pages.size() * 4, cudaMemcpyHostToDevice, stream_));
    GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  }
  return hit;
}

void CudaBackend::commit_pages(Seq& s) {
  s.committed = pool_.commit_filled(s.pages, s.committed, s.hist, s.chain);
}

}  // namespace gridq::cuda

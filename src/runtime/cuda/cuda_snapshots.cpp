// Ring snapshots for prefix caching on models with sliding-window layers (cuda_backend.h, docs/serving.md "KV
// cache"). A prefix hit shares the full layers' pages, but the sliding layers keep their KV in rings per
// sequence: without the rings at the cache point a hit must recompute the stacked windows' reach,
// Σ (window − 1) positions — 18,396 on Laguna-S-2.1, more than most prompts, so the hit saved nothing.
// A snapshot is every sliding layer's K and V rows of positions [boundary − (window − 1), boundary) copied
// out of a sequence's rings at a page boundary of its committed prefix; a later sequence whose match reaches
// that boundary gets them copied into its own rings and starts there. The rows are the ones the forward
// wrote for the same tokens at the same positions, so the continuation is the uncached one bit for bit (the
// forward is batch-invariant). Snapshots are taken at the end of a prompt, when a sequence is removed (after
// its answer), and where a prefix hit without one has recomputed up to its boundary (the shared system
// prompt of many conversations: the first hit pays the recompute, the later ones start at the boundary);
// kept in an LRU pool of whole snapshots, and looked up by the chain hash of the prefix's last page with
// the prefix's token ids compared before use. Why the recomputed rows are exact: the recompute starts
// Σ (window − 1) before the boundary, so sliding layer l's K/V are exact from Σ over the sliding layers
// before l of (window − 1) past that start, which is at or before boundary − (window_l − 1).
#include <algorithm>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"

namespace gridq::cuda {

int64_t CudaBackend::init_ring_layers() {
  ring_layers_.clear();
  snap_bytes_ = 0;
  for (size_t l = 0; l < spec_.layers.size(); ++l) {
    const int ri = plan_.ring_index[l];
    if (ri < 0) continue;
    const auto& L = spec_.layers[l];
    ring_layers_.push_back({ri, static_cast<int64_t>(L.n_kv_heads) * L.head_dim * plan_.kv_elem_bytes,
                            std::max(0, L.window - 1)});
    snap_bytes_ += 2 * ring_layers_.back().keep * ring_layers_.back().row_bytes;
  }
  return snap_bytes_;
}

// Rows [boundary − n, boundary) of every sliding layer (n = min(keep, boundary)), ring slot p % slots, to or
// from snapshot `snap` (per layer: K rows then V rows, keep rows each, position order).
Status CudaBackend::copy_rings(int slot, int snap, int64_t boundary, bool to_snapshot) {
  uint8_t* rings = rings_.as<uint8_t>() + static_cast<int64_t>(slot) * plan_.ring_bytes_per_seq;
  uint8_t* sn = snaps_.as<uint8_t>() + static_cast<int64_t>(snap) * snap_bytes_;
  for (const RingLayer& r : ring_layers_) {
    const int64_t slots = plan_.ring_slots[static_cast<size_t>(r.ri)];
    const int64_t n = std::min<int64_t>(r.keep, boundary), first = boundary - n;
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* ring = rings + plan_.ring_offset[static_cast<size_t>(r.ri)] + kv * slots * r.row_bytes;
      uint8_t* rows = sn + kv * r.keep * r.row_bytes;
      // The positions' slots are one run, or two where they wrap past the ring's end.
      const int64_t a = first % slots, run = std::min(n, slots - a);
      for (const auto& [ring_row, snap_row, count] :
           {std::tuple<int64_t, int64_t, int64_t>{a, 0, run}, {0, run, n - run}}) {
        if (count <= 0) continue;
        uint8_t* rp = ring + ring_row * r.row_bytes;
        uint8_t* sp = rows + snap_row * r.row_bytes;
        GRIDQ_CUDA(cudaMemcpyAsync(to_snapshot ? sp : rp, to_snapshot ? rp : sp,
                                   static_cast<size_t>(count * r.row_bytes), cudaMemcpyDeviceToDevice,
                                   stream_));
      }
    }
    sn += 2 * r.keep * r.row_bytes;
  }
  return {};
}

Status CudaBackend::save_snapshot(const Seq& s) {
  if (s.no_history || s.committed == 0) return {};
  const int64_t boundary = static_cast<int64_t>(s.committed) * plan_.page_tokens;
  if (boundary > s.len) return {};
  // Every position the snapshot holds must still be in the rings (a ring keeps window + chunk positions).
  for (const RingLayer& r : ring_layers_)
    if (s.len - boundary + r.keep > plan_.ring_slots[static_cast<size_t>(r.ri)]) return {};
  return save_snapshot_at(s.slot, boundary, s.chain,
                          std::span<const int32_t>(s.hist).first(static_cast<size_t>(boundary)));
}

Status CudaBackend::save_snapshot_at(int slot, int64_t boundary, uint64_t hash,
                                     std::span<const int32_t> prefix) {
  if (snap_.empty() || !pool_.caching() || boundary <= 0) return {};
  if (auto it = snap_of_hash_.find(hash); it != snap_of_hash_.end()) {
    const RingSnapshot& have = snap_[static_cast<size_t>(it->second)];
    if (have.boundary == boundary && std::equal(have.tokens.begin(), have.tokens.end(), prefix.begin())) {
      snap_lru_.remove(it->second);  // the same prefix: only refresh its place
      snap_lru_.push_back(it->second);
      return {};
    }
  }
  int idx = -1;
  for (size_t i = 0; i < snap_.size() && idx < 0; ++i)
    if (snap_[i].boundary == 0) idx = static_cast<int>(i);
  if (idx < 0) {  // evict the least recently used
    idx = snap_lru_.front();
    snap_lru_.pop_front();
    snap_of_hash_.erase(snap_[static_cast<size_t>(idx)].hash);
  }
  GRIDQ_RETURN_IF_ERROR(copy_rings(slot, idx, boundary, true));
  RingSnapshot& sn = snap_[static_cast<size_t>(idx)];
  sn.boundary = boundary;
  sn.hash = hash;
  sn.tokens.assign(prefix.begin(), prefix.end());
  snap_of_hash_[sn.hash] = idx;
  snap_lru_.push_back(idx);
  return {};
}

Expected<int64_t> CudaBackend::restore_snapshot(const Seq& s, std::span<const int32_t> tokens, size_t pages,
                                                int64_t above) {
  if (snap_.empty() || snap_of_hash_.empty() || pages == 0) return int64_t{0};
  const int P = plan_.page_tokens;
  std::vector<uint64_t> chain(pages);
  uint64_t h = 0;
  for (size_t j = 0; j < pages; ++j)
    chain[j] = h = pool_.chain_hash(h, tokens.subspan(j * static_cast<size_t>(P), static_cast<size_t>(P)));
  for (size_t j = pages; j > 0 && static_cast<int64_t>(j) * P > above; --j) {
    auto it = snap_of_hash_.find(chain[j - 1]);
    if (it == snap_of_hash_.end()) continue;
    const RingSnapshot& sn = snap_[static_cast<size_t>(it->second)];
    const int64_t boundary = static_cast<int64_t>(j) * P;
    if (sn.boundary != boundary || !std::equal(sn.tokens.begin(), sn.tokens.end(), tokens.begin())) continue;
    GRIDQ_RETURN_IF_ERROR(copy_rings(s.slot, it->second, boundary, false));
    snap_lru_.remove(it->second);
    snap_lru_.push_back(it->second);
    return boundary;
  }
  return int64_t{0};
}

}  // namespace gridq::cuda

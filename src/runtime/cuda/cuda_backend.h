// CudaBackend: the runtime::Backend on one GPU (gpu-engine.md §2). Owns the device model, the KV cache (pages
// for full-attention layers, a ring per sequence for sliding layers, sized by kv_plan from the memory left
// after the weights), the step workspace, and the forward (forward.cpp), which mirrors cpu/layer_ops.cpp.
// A forward of any size runs as steps of at most kMaxStepRows rows (a prefill chunk shares every weight
// read), attention in slices of ≤ kAttnSliceRows rows, decode steps of ≤ kMaxSliceRows rows as CUDA graphs.
#pragma once

#include <array>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_model.h"
#include "runtime/cuda/upload.h"
#include "runtime/device.h"
#include "runtime/kv_pages.h"
#include "runtime/kv_plan.h"

namespace gridq::cuda {

// Bytes the backend holds, reported by `gridq serve` at start.
struct MemoryReport {
  size_t weights = 0, packed = 0, kv_pages = 0, kv_rings = 0, kv_snapshots = 0, workspace = 0;
  int64_t kv_tokens = 0;  // full-layer KV tokens that fit (over all sequences)
  int snapshots = 0;      // ring snapshots of the prefix cache (cuda_snapshots.cpp)
  int max_seqs = 0;
  std::string device;
};

class CudaBackend final : public runtime::Backend {
 public:
  static Expected<std::unique_ptr<CudaBackend>> create(const model::ModelSpec& spec,
                                                       const runtime::ModelWeights& w,
                                                       const runtime::DeviceOptions& opts);
  // A model already on the device (the synthetic full-size models of `gridq bench decode`).
  static Expected<std::unique_ptr<CudaBackend>> from_device_model(const model::ModelSpec& spec,
                                                                  std::unique_ptr<DeviceModel> dm,
                                                                  const runtime::DeviceOptions& opts);
  ~CudaBackend() override;

  const model::ModelSpec& spec() const override { return spec_; }
  Status add_sequence(runtime::SeqId id) override;
  void remove_sequence(runtime::SeqId id) override;
  int64_t sequence_length(runtime::SeqId id) const override;
  Status forward(std::span<const runtime::BatchItem> items, std::vector<float>& logits) override;
  bool samples_on_device() const override { return true; }
  Status forward_sampled(std::span<const runtime::BatchItem> items,
                         std::span<const runtime::SamplePlan* const> plans,
                         std::vector<runtime::SampledToken>& out) override;
  // Rows forward_sampled left to the host so far (their candidate set exceeded the device sort; sample.cu).
  int64_t host_sampled_rows() const { return host_sampled_rows_; }

  std::string memory_report() const override;
  std::vector<std::string> kernel_report() const override;
  runtime::KvPageStats kv_pages() const override;  // cuda_kv.cpp
  int64_t kv_pages_needed(runtime::SeqId id, int64_t new_len) const override;
  // Prefix caching (cuda_kv.cpp): shared full-layer pages, the rows below a sequence's floor recomputed for
  // the sliding rings without writing their full-layer KV (RowInfo::kv_write). Off until asked.
  bool supports_prefix_caching() const override { return true; }
  Status set_prefix_caching(bool on) override;
  Expected<runtime::PrefixHit> attach_prefix(runtime::SeqId id, std::span<const int32_t> tokens) override;
  const runtime::ModelWeights* weight_metadata() const override {
    return meta_.layers.empty() ? nullptr : &meta_;
  }
  const MemoryReport& memory() const { return mem_; }
  const DeviceModel& device_model() const { return *dm_; }
  // Sets a sequence's length without running its tokens (benchmarks at a given context: the KV it reads is
  // whatever the pages hold). Allocates the pages.
  Status set_length_for_bench(runtime::SeqId id, int64_t len);
  // Fills every KV page and ring with random finite BF16 (benchmarks read realistic, not zero, KV).
  Status randomize_kv_for_bench(uint64_t seed);

  // Per-phase timing of the next forwards (CUDA events around each phase, summed per name), for bench.
  void set_phase_timing(bool on) { timing_ = on; }
  std::map<std::string, double> take_phase_ms();
  // Kernel nodes of the captured decode graph of `rows` rows (0 until that graph exists): the launches of a
  // replayed step.
  int graph_kernel_nodes(int rows) const {
    return rows >= 1 && rows <= kGraphRows ? graph_kernels_[rows] : 0;
  }

  struct Step;        // one step's rows (forward.h)
  struct Work;        // the step buffers (forward.h)
  struct PhaseTimer;  // bench phase timing (forward_ops.h)

 private:
  CudaBackend() = default;
  Status init(const runtime::DeviceOptions& opts);
  // forward() (logits set) or forward_sampled() (plans and sampled set).
  Status run_items(std::span<const runtime::BatchItem> items,
                   std::span<const runtime::SamplePlan* const> plans, std::vector<float>* logits,
                   std::vector<runtime::SampledToken>* sampled);
  Status run_step(const Step& st, std::vector<float>* logits, std::vector<runtime::SampledToken>* sampled);
  Status sample_step(const Step& st, std::vector<runtime::SampledToken>& out);  // sampling.cpp
  Status enqueue_step(const Step& st, PhaseTimer& timer);

  struct Seq {
    int slot = 0;
    int64_t len = 0;
    std::vector<int> pages;
    // Prefix caching: positions below `floor` have their full-layer KV in shared pages (not rewritten);
    // pages [0, committed) are registered or were matched; hist holds the tokens at positions [0, len).
    // A bench sequence (set_length_for_bench) has no token history and registers nothing.
    int64_t floor = 0;
    size_t committed = 0;
    uint64_t chain = 0;
    std::vector<int32_t> hist;
    bool no_history = false;
    // A prefix hit that found no ring snapshot recomputes from below its boundary; when the recompute
    // reaches snap_at (the boundary, > 0 until then) the rings are saved under snap_hash (its chain hash).
    int64_t snap_at = 0;
    uint64_t snap_hash = 0;
  };
  // Registers s's pages that its history has filled since the last call.
  void commit_pages(Seq& s);
  int64_t reach_ = 0;  // Σ over sliding layers of (window − 1): the stacked windows' receptive field

  // Ring snapshots (cuda_snapshots.cpp, docs/serving.md "KV cache"): every sliding layer's K/V of the
  // window − 1 positions before a page boundary of a committed prefix, in a small LRU pool on the device, so
  // that a prefix hit at that boundary restores the rings instead of recomputing the stacked windows' reach.
  struct RingSnapshot {
    int64_t boundary = 0;         // the prefix is positions [0, boundary), whole pages; 0: slot empty
    uint64_t hash = 0;            // chain hash of the prefix's last page: the lookup key
    std::vector<int32_t> tokens;  // the prefix's ids: a hit is checked against them, the hash never trusted
  };
  struct RingLayer {  // sliding layer ri's K/V row bytes and the positions a later query can still read
    int ri = 0;
    int64_t row_bytes = 0;
    int keep = 0;  // window − 1
  };
  std::vector<RingLayer> ring_layers_;  // the sliding layers in order (set at init)
  int64_t snap_bytes_ = 0;              // one snapshot
  int64_t init_ring_layers();  // sets ring_layers_ and snap_bytes_ from spec_ and plan_; returns the latter
  // Taken at the end of a prompt and when a sequence is removed, at s's last committed page boundary.
  Status save_snapshot(const Seq& s);
  // The rings of `slot`, which hold positions up to boundary − 1, saved as the snapshot of `prefix` (its
  // first boundary ids; hash: the chain hash of its last page). A prefix already saved is only refreshed.
  Status save_snapshot_at(int slot, int64_t boundary, uint64_t hash, std::span<const int32_t> prefix);
  // The longest boundary ≤ pages · page_tokens of `tokens` that has a snapshot, restored into s's rings;
  // 0 when none.
  // Only boundaries past `above` are looked for (below it the hit's own recompute starts earlier anyway).
  Expected<int64_t> restore_snapshot(const Seq& s, std::span<const int32_t> tokens, size_t pages,
                                     int64_t above);
  Status copy_rings(int slot, int snap, int64_t boundary, bool to_snapshot);
  DeviceBuffer snaps_;
  std::vector<RingSnapshot> snap_;                  // [snapshots]
  std::unordered_map<uint64_t, int> snap_of_hash_;  // hash → index into snap_
  std::list<int> snap_lru_;                         // the filled snapshots, least recently used first

  model::ModelSpec spec_;
  std::unique_ptr<DeviceModel> dm_;
  runtime::KvPlan plan_;
  MemoryReport mem_;
  cudaStream_t stream_ = nullptr;
  // The shared expert's stream: it runs beside the router and the routed experts (forward_layers.cpp moe),
  // forked from and joined back into stream_ by the two events (graph capture records them as edges).
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cudaStream_t pf_ = nullptr;  // L2 prefetches ahead of the kernels (forward_l2_ahead)
  cudaEvent_t pf_fork_ = nullptr, pf_join_ = nullptr;
  WorkspaceBuffers ws_, ws_side_;  // the main stream's and the side stream's split-K workspaces
  DeviceBuffer pages_, rings_, page_table_;
  int max_seqs_ = 0, max_pages_per_seq_ = 0;
  int64_t max_len_ = 0;
  runtime::PagePool pool_;  // the pages of pages_ (refcounts, free list)
  std::vector<int> free_slots_;
  std::map<runtime::SeqId, Seq> seqs_;
  // Gives sequence `id` pages for new_len positions (refusing past max_model_len or a full cache).
  Status ensure_pages(runtime::SeqId id, Seq& s, int64_t new_len);
  std::unique_ptr<Work> work_;
  bool timing_ = false;
  bool graphs_on_ = true;
  static constexpr int kGraphRows = 64;         // = detail::kMaxSliceRows (static_assert in cuda_backend.cpp)
  std::array<void*, kGraphRows + 1> graphs_{};  // cudaGraphExec_t per decode row count 1..kGraphRows
  std::array<int, kGraphRows + 1> graph_seen_{};
  std::array<int, kGraphRows + 1> graph_kernels_{};
  std::map<std::string, double> phase_ms_;
  int64_t host_sampled_rows_ = 0;
  runtime::ModelWeights meta_;  // the uploaded matrices' metadata (data pointers cleared)
};

}  // namespace gridq::cuda

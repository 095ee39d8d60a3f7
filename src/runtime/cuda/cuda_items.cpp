// The step builder of the CUDA backend (cuda_backend.h): a batch of items cut into steps of consecutive
// positions per sequence, each run on the device (forward.cpp), then the sequences' lengths, histories,
// prefix-cache pages and ring snapshots updated.
#include <algorithm>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/forward.h"

namespace gridq::cuda {

using detail::kMaxSliceRows;

Status CudaBackend::forward(std::span<const runtime::BatchItem> items, std::vector<float>& logits) {
  return run_items(items, {}, &logits, nullptr);
}

Status CudaBackend::forward_sampled(std::span<const runtime::BatchItem> items,
                                    std::span<const runtime::SamplePlan* const> plans,
                                    std::vector<runtime::SampledToken>& out) {
  const size_t rows = runtime::logits_rows(items);
  if (plans.size() != rows)
    return err("cuda backend: {} sampling plans for {} logits rows", plans.size(), rows);
  return run_items(items, plans, nullptr, &out);
}

Status CudaBackend::run_items(std::span<const runtime::BatchItem> items,
                              std::span<const runtime::SamplePlan* const> plans, std::vector<float>* logits,
                              std::vector<runtime::SampledToken>* sampled) {
  // Validate everything first: a refused batch changes no sequence.
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = seqs_.find(items[i].seq);
    if (it == seqs_.end()) return err("cuda backend: unknown sequence {}", items[i].seq);
    for (size_t j = 0; j < i; ++j)
      if (items[j].seq == items[i].seq)
        return err("cuda backend: sequence {} appears twice in one batch", items[i].seq);
    for (int32_t tok : items[i].tokens)
      if (tok < 0 || tok >= spec_.vocab_size)
        return err("cuda backend: token id {} out of range [0, {})", tok, spec_.vocab_size);
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    if (it->second.len + n > max_len_)
      return err("cuda backend: sequence {} would reach {} tokens, past max_model_len {}", items[i].seq,
                 it->second.len + n, max_len_);
  }
  for (const auto& item : items) {
    Seq& s = seqs_.at(item.seq);
    GRIDQ_RETURN_IF_ERROR(ensure_pages(item.seq, s, s.len + static_cast<int64_t>(item.tokens.size())));
  }
  // Rows in item order, cut into steps of ≤ step_rows rows and ≤ kMaxSliceRows logit rows; a step's rows
  // of one sequence are consecutive positions.
  Step st;
  st.sampled = sampled != nullptr;
  size_t next_plan = 0;
  auto flush = [&]() -> Status {
    if (st.ids.empty()) return {};
    GRIDQ_RETURN_IF_ERROR(run_step(st, logits, sampled));
    st = Step{};
    st.sampled = sampled != nullptr;
    return {};
  };
  for (const auto& item : items) {
    Seq& s = seqs_.at(item.seq);
    const int64_t n = static_cast<int64_t>(item.tokens.size());
    for (int64_t j = 0; j < n; ++j) {
      if (s.snap_at > 0 && s.len + j == s.snap_at && j > 0) {
        // A prefix hit recomputed up to its boundary: end the step there and keep the rings as a snapshot,
        // so the next sequence with this prefix starts at the boundary (one step more for this batch).
        GRIDQ_RETURN_IF_ERROR(flush());
        std::vector<int32_t> prefix(s.hist);
        prefix.insert(prefix.end(), item.tokens.begin(), item.tokens.begin() + j);
        GRIDQ_RETURN_IF_ERROR(save_snapshot_at(s.slot, s.snap_at, s.snap_hash, prefix));
        s.snap_at = 0;
      }
      const bool want = item.logits == runtime::LogitsMode::kAll ||
                        (item.logits == runtime::LogitsMode::kLast && j == n - 1);
      if (st.T() == work_->step_rows || (want && st.logit_rows.size() == static_cast<size_t>(kMaxSliceRows)))
        GRIDQ_RETURN_IF_ERROR(flush());
      if (want) {
        st.logit_rows.push_back(st.T());
        if (sampled) st.plans.push_back(plans[next_plan++]);
      }
      st.ids.push_back(item.tokens[static_cast<size_t>(j)]);
      st.pos.push_back(static_cast<int>(s.len + j));
      st.slot.push_back(s.slot);
      st.kv_write.push_back(s.len + j >= s.floor ? 1 : 0);
    }
  }
  GRIDQ_RETURN_IF_ERROR(flush());
  for (const auto& item : items) {
    Seq& s = seqs_.at(item.seq);
    s.len += static_cast<int64_t>(item.tokens.size());
    if (!s.no_history) {
      s.hist.insert(s.hist.end(), item.tokens.begin(), item.tokens.end());
      if (s.snap_at > 0 && s.len == s.snap_at) {  // this batch ended at the boundary itself
        GRIDQ_RETURN_IF_ERROR(
            save_snapshot_at(s.slot, s.snap_at, s.snap_hash,
                             std::span<const int32_t>(s.hist).first(static_cast<size_t>(s.len))));
        s.snap_at = 0;
      }
      commit_pages(s);
      // The end of a prompt: where the next turn of a conversation is likely to hit.
      if (item.logits == runtime::LogitsMode::kLast && item.tokens.size() > 1)
        GRIDQ_RETURN_IF_ERROR(save_snapshot(s));
    }
  }
  return {};
}

}  // namespace gridq::cuda

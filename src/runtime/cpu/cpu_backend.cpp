#include "runtime/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>

#include "runtime/cpu/matmul.h"

namespace gridq::runtime::cpu {

Expected<std::unique_ptr<CpuBackend>> CpuBackend::create(model::ModelSpec spec, ModelWeights weights,
                                                         std::shared_ptr<void> keepalive, CpuOptions opts) {
  GRIDQ_RETURN_IF_ERROR(validate_weights(spec, weights));
  if (opts.threads > 0) omp_set_num_threads(opts.threads);
  std::unique_ptr<CpuBackend> b(new CpuBackend());
  b->spec_ = std::move(spec);
  b->w_ = std::move(weights);
  b->keepalive_ = std::move(keepalive);
  return b;
}

Status CpuBackend::add_sequence(SeqId id) {
  if (seqs_.count(id)) return err("cpu backend: sequence {} already exists", id);
  SeqState s;
  s.layers.reserve(static_cast<size_t>(spec_.n_layers));
  for (const auto& L : spec_.layers) s.layers.push_back(fresh_layer_cache(L));
  seqs_.emplace(id, std::move(s));
  return {};
}

void CpuBackend::remove_sequence(SeqId id) { seqs_.erase(id); }

int64_t CpuBackend::sequence_length(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.len;
}

Status CpuBackend::forward(std::span<const BatchItem> items, std::vector<float>& logits) {
  const int64_t H = spec_.hidden_size;
  AttnLayout lay;
  std::vector<SeqState*> state;  // [n_items]
  int64_t T = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = seqs_.find(items[i].seq);
    if (it == seqs_.end()) return err("cpu backend: unknown sequence {}", items[i].seq);
    for (size_t j = 0; j < i; ++j)
      if (items[j].seq == items[i].seq)
        return err("cpu backend: sequence {} appears twice in one batch", items[i].seq);
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    state.push_back(&it->second);
    lay.seqs.push_back(AttnSeq{nullptr, it->second.len, T, n});
    for (int64_t j = 0; j < n; ++j) {
      const int32_t tok = items[i].tokens[static_cast<size_t>(j)];
      if (tok < 0 || tok >= spec_.vocab_size)
        return err("cpu backend: token id {} out of range [0, {})", tok, spec_.vocab_size);
      lay.pos.push_back(it->second.len + j);
      lay.seq_of.push_back(i);
    }
    T += n;
  }
  if (T == 0) return {};

  std::vector<float> x(static_cast<size_t>(T * H));  // [T, H] residual stream
  {
    int64_t t = 0;
    for (const auto& item : items)
      for (int32_t tok : item.tokens) dequantize_row(w_.embed, tok, x.data() + (t++) * H);
  }
  std::vector<float> a;  // [T, H] normalised input of a block (scratch)
  for (int l = 0; l < spec_.n_layers; ++l) {
    for (size_t i = 0; i < items.size(); ++i) lay.seqs[i].cache = &state[i]->layers[static_cast<size_t>(l)];
    decoder_layer(spec_, w_.layers[static_cast<size_t>(l)], l, lay, x.data(), a);
  }
  for (size_t i = 0; i < items.size(); ++i) state[i]->len += static_cast<int64_t>(items[i].tokens.size());

  // Logits for the requested rows only.
  std::vector<int64_t> rows;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    if (n == 0) continue;
    if (items[i].logits == LogitsMode::kAll)
      for (int64_t j = 0; j < n; ++j) rows.push_back(lay.seqs[i].start + j);
    else if (items[i].logits == LogitsMode::kLast)
      rows.push_back(lay.seqs[i].start + n - 1);
  }
  if (rows.empty()) return {};
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> h(static_cast<size_t>(R * H));
  for (int64_t r = 0; r < R; ++r)
    rmsnorm_rows(x.data() + rows[static_cast<size_t>(r)] * H, w_.final_norm.data(), 1, H, spec_.norm_eps,
                 h.data() + r * H);
  const size_t base = logits.size();
  logits.resize(base + static_cast<size_t>(R * spec_.vocab_size));
  matmul(w_.lm_head, h.data(), R, logits.data() + base);
  return {};
}

}  // namespace gridq::runtime::cpu

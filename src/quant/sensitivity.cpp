// KlProbe (sensitivity.h): the BF16 model's ModelWeights with some layers' routed experts re-pointed at
// staged candidate bytes, run by the CPU backend over fixed calibration sequences.
#include "quant/sensitivity.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"

namespace gridq::quant {

namespace {

using runtime::QMatrix;
using runtime::WeightFormat;

constexpr int kSeqsPerForward = 4;  // sequences batched into one forward (bounds the logits buffer)

// out[v] = logits[v] − logsumexp(logits), float64. False when the row has no distribution.
bool log_softmax(const float* logits, int64_t V, double* out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (std::isnan(logits[v]) || logits[v] == std::numeric_limits<float>::infinity()) return false;
    mx = std::max(mx, static_cast<double>(logits[v]));
  }
  if (!std::isfinite(mx)) return false;
  double s = 0.0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(logits[v]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t v = 0; v < V; ++v) out[v] = static_cast<double>(logits[v]) - lse;
  return true;
}

// out[v] = lp[v] − log Σ exp(lp), float64: an fp32 log-prob row made to sum to exactly 1 again.
void renorm(const float* lp, int64_t V, double* out) {
  double mx = -std::numeric_limits<double>::infinity(), z = 0.0;
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(lp[v]));
  for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(lp[v]) - mx);
  const double lz = mx + std::log(z);
  for (int64_t v = 0; v < V; ++v) out[v] = static_cast<double>(lp[v]) - lz;
}

// A CB view of rows [first_row, first_row + rows) of a stacked cb_qweight / weight_scale pair.
Expected<QMatrix> cb_view(const ProbeStack& s, std::span<const uint8_t> q, std::span<const uint8_t> scale,
                          int64_t stack_rows, int64_t first_row, int64_t rows, int64_t cols,
                          std::deque<std::vector<float>>& scales) {
  const gridbook::Rung& r = s.codebook->rung;
  if (cols % gridbook::kSuperblock != 0)
    return err("probe: layer {} {}: cols {} is not a multiple of 256", s.layer, s.format, cols);
  QMatrix m;
  m.format = WeightFormat::kCB;
  m.rows = rows;
  m.cols = cols;
  m.rung = &r;
  m.codebook = s.codebook;
  m.act_bits = r.grid == gridbook::Grid::FP4 ? 4 : 8;
  m.row_bytes = gridbook::row_bytes(r, cols);
  if (static_cast<int64_t>(q.size()) % (stack_rows * m.row_bytes) != 0)
    return err("probe: layer {} {}: {} bytes are not whole [E, {}, {}] stacks", s.layer, s.format, q.size(),
               stack_rows, m.row_bytes);
  if ((first_row + rows) * m.row_bytes > static_cast<int64_t>(q.size()))
    return err("probe: layer {} {}: rows {}..{} are beyond the stored stack", s.layer, s.format, first_row,
               first_row + rows);
  m.data = q.data() + first_row * m.row_bytes;
  if (r.grid == gridbook::Grid::FP8) {
    if ((first_row + rows) * 4 > static_cast<int64_t>(scale.size()))
      return err("probe: layer {} {}: the weight_scale is missing or short", s.layer, s.format);
    auto& v = scales.emplace_back(static_cast<size_t>(rows));  // 4-byte aligned copy
    std::memcpy(v.data(), scale.data() + first_row * 4, v.size() * sizeof(float));
    m.row_scale = v.data();
  }
  return m;
}

}  // namespace

int64_t KlProbe::tokens() const {
  int64_t n = 0;
  for (const auto& s : seqs_) n += static_cast<int64_t>(s.size());
  return n;
}

Expected<std::unique_ptr<KlProbe>> KlProbe::create(const model::LoadedModel& model,
                                                   std::vector<std::vector<int32_t>> seqs, int threads) {
  if (seqs.empty()) return err("probe: no calibration sequences to measure KL on");
  std::unique_ptr<KlProbe> p(new KlProbe());
  p->model_ = &model;
  p->threads_ = threads;
  for (const auto& s : seqs) {
    if (s.size() < 2) return err("probe: a sequence of {} tokens has no scored position", s.size());
    p->positions_ += static_cast<int64_t>(s.size()) - 1;
  }
  p->seqs_ = std::move(seqs);
  GRIDQ_RETURN_IF_ERROR(p->run({}, nullptr).status());
  return p;
}

Expected<double> KlProbe::kl(std::span<const ProbeStack> stacks) {
  GRIDQ_ASSIGN_OR_RETURN(std::vector<double> per, run(stacks, &teacher_lp_));
  double s = 0.0;
  for (double x : per) s += x;  // position order: thread-count independent
  return s / static_cast<double>(positions_);
}

// teacher == nullptr: fills teacher_lp_ and returns nothing; else returns KL per position [positions].
Expected<std::vector<double>> KlProbe::run(std::span<const ProbeStack> stacks,
                                           const std::vector<float>* teacher) {
  const model::ModelSpec& spec = model_->spec;
  GRIDQ_ASSIGN_OR_RETURN(runtime::ModelWeights w, runtime::build_model_weights(spec, model_->weights));
  std::deque<std::vector<float>> scales;
  std::vector<uint8_t> seen(static_cast<size_t>(spec.n_layers), 0);
  for (const ProbeStack& s : stacks) {
    if (s.layer < 0 || s.layer >= spec.n_layers)
      return err("probe: layer {} is not in the model's {} layers", s.layer, spec.n_layers);
    if (seen[static_cast<size_t>(s.layer)]++) return err("probe: layer {} is given twice", s.layer);
    if (s.format == "BF16") continue;
    if (!s.codebook || s.codebook->rung.name() != s.format)
      return err(
          "probe: layer {} {}: measured allocation runs BF16 and CB rungs only (use --budget-score "
          "proxy for other candidates)",
          s.layer, s.format);
    runtime::LayerWeights& L = w.layers[static_cast<size_t>(s.layer)];
    const int64_t E = static_cast<int64_t>(L.expert_gate.size());
    if (E == 0) return err("probe: layer {} has no routed experts", s.layer);
    const int64_t I = L.expert_gate[0].rows, Hc = L.expert_gate[0].cols;
    for (int64_t e = 0; e < E; ++e) {
      const size_t ei = static_cast<size_t>(e);
      GRIDQ_ASSIGN_OR_RETURN(L.expert_gate[ei],
                             cb_view(s, s.gate_up, s.gate_up_scale, 2 * I, e * 2 * I, I, Hc, scales));
      GRIDQ_ASSIGN_OR_RETURN(L.expert_up[ei],
                             cb_view(s, s.gate_up, s.gate_up_scale, 2 * I, e * 2 * I + I, I, Hc, scales));
      GRIDQ_ASSIGN_OR_RETURN(L.expert_down[ei], cb_view(s, s.down, s.down_scale, Hc, e * Hc, Hc, I, scales));
    }
    const int64_t gu_bytes = E * 2 * I * gridbook::row_bytes(s.codebook->rung, Hc);
    const int64_t dn_bytes = E * Hc * gridbook::row_bytes(s.codebook->rung, I);
    if (static_cast<int64_t>(s.gate_up.size()) != gu_bytes || static_cast<int64_t>(s.down.size()) != dn_bytes)
      return err("probe: layer {} {}: stacks hold {} + {} bytes, expected {} + {}", s.layer, s.format,
                 s.gate_up.size(), s.down.size(), gu_bytes, dn_bytes);
  }
  runtime::cpu::CpuOptions co;
  co.threads = threads_;
  GRIDQ_ASSIGN_OR_RETURN(auto be, runtime::cpu::CpuBackend::create(spec, std::move(w), nullptr, co));

  const int64_t V = spec.vocab_size;
  if (!teacher) teacher_lp_.assign(static_cast<size_t>(positions_ * V), 0.0f);
  std::vector<double> per(teacher ? static_cast<size_t>(positions_) : 0);
  std::vector<float> logits;
  int64_t pos0 = 0;  // first scored position of the batch
  for (size_t b = 0; b < seqs_.size(); b += kSeqsPerForward) {
    const size_t nb = std::min<size_t>(kSeqsPerForward, seqs_.size() - b);
    std::vector<runtime::BatchItem> items;
    for (size_t i = 0; i < nb; ++i) {
      const runtime::SeqId id = static_cast<runtime::SeqId>(b + i + 1);
      GRIDQ_RETURN_IF_ERROR(be->add_sequence(id));
      items.push_back({id, seqs_[b + i], runtime::LogitsMode::kAll});
    }
    GRIDQ_RETURN_IF_ERROR(be->forward(items, logits));
    for (const auto& it : items) be->remove_sequence(it.seq);
    // Row offsets of each sequence's scored positions in `logits` and in the position index.
    std::vector<std::pair<int64_t, int64_t>> rows;  // (logits row, position)
    int64_t row = 0;
    for (size_t i = 0; i < nb; ++i) {
      const int64_t n = static_cast<int64_t>(seqs_[b + i].size());
      for (int64_t j = 0; j + 1 < n; ++j) rows.emplace_back(row + j, pos0++);
      row += n;
    }
    bool bad = false;
#pragma omp parallel
    {
      std::vector<double> lq(static_cast<size_t>(V)), lp(static_cast<size_t>(V));
      std::vector<float> sq(static_cast<size_t>(V));
#pragma omp for schedule(static) reduction(|| : bad)
      for (int64_t k = 0; k < static_cast<int64_t>(rows.size()); ++k) {
        const auto [r, p] = rows[static_cast<size_t>(k)];
        if (!log_softmax(logits.data() + r * V, V, lq.data())) {
          bad = true;
          continue;
        }
        float* tp = teacher_lp_.data() + p * V;
        if (!teacher) {
          for (int64_t v = 0; v < V; ++v) tp[v] = static_cast<float>(lq[static_cast<size_t>(v)]);
          continue;
        }
        // Both sides as fp32 log-probs renormalised in float64 (as `gridq eval` compares them), so p and q
        // each sum to 1, KL >= 0, and the teacher compared with itself gives exactly 0.
        for (int64_t v = 0; v < V; ++v)
          sq[static_cast<size_t>(v)] = static_cast<float>(lq[static_cast<size_t>(v)]);
        renorm(tp, V, lp.data());
        renorm(sq.data(), V, lq.data());
        double kl = 0.0;
        for (int64_t v = 0; v < V; ++v) {
          const size_t i = static_cast<size_t>(v);
          kl += std::exp(lp[i]) * (lp[i] - lq[i]);
        }
        per[static_cast<size_t>(p)] = kl;
      }
    }
    if (bad) return err("probe: the forward gave a row of non-finite logits");
  }
  return per;
}

}  // namespace gridq::quant

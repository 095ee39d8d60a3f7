// One layer of the layer-streamed teacher (layer_streamer_run.h): its captures, the hooks that fill them, and
// the S4 checks and statistics at the end.
#include "quant/layer_streamer_run.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace gridq::quant {

namespace {

constexpr int kRecomputeSamples = 64;  // tokens (or token–expert pairs) per recompute check
constexpr double kRouteTie = 1e-4;     // biased-score gap below which fp32 and float64 may pick differently

// `count` indices spread evenly over [0, n), ascending, distinct (all of them when n ≤ count).
std::vector<int64_t> spread(int64_t n, int64_t count) {
  std::vector<int64_t> v;
  if (n <= 0 || count <= 0) return v;
  if (n <= count) {
    for (int64_t i = 0; i < n; ++i) v.push_back(i);
    return v;
  }
  for (int64_t k = 0; k < count; ++k) v.push_back(count == 1 ? 0 : k * (n - 1) / (count - 1));
  return v;
}

}  // namespace

InputStats Capture::finish() {
  InputStats s;
  s.name = name;
  s.cols = acc.cols();
  s.n = acc.rows();
  s.H = acc.finish();
  s.imatrix.assign(static_cast<size_t>(s.cols), 0.0f);
  if (s.n > 0)
    for (int c = 0; c < s.cols; ++c)
      s.imatrix[static_cast<size_t>(c)] = static_cast<float>(
          static_cast<double>(s.H[static_cast<size_t>(c) * s.cols + c]) / static_cast<double>(s.n));
  s.n_hold = hold.count();
  s.hold_seen = hold.seen();
  s.holdout = std::move(hold.rows());
  return s;
}

LayerRun::LayerRun(const LayerStreamer::Impl& st, int l)
    : st_(st),
      l_(l),
      spec_(st.lm.spec),
      L_(spec_.layers[static_cast<size_t>(l)]),
      lw_(st.w.layers[static_cast<size_t>(l)]),
      moe_(L_.mlp == model::MlpKind::kMoe),
      H_(spec_.hidden_size),
      S_(st.seq_len),
      qw_(int64_t{L_.n_heads} * L_.head_dim),
      E_(moe_ ? spec_.moe.n_experts : 0),
      K_(moe_ ? spec_.moe.top_k : 0),
      pre_(fmt::format("layers.{}.", l)),
      attn_in_(pre_ + "attn_in", static_cast<int>(H_)),
      o_in_(pre_ + "o_in", static_cast<int>(qw_)),
      mlp_in_(pre_ + "mlp_in", static_cast<int>(H_)),
      id_attn_(lw_.input_norm.data(), H_, spec_.norm_eps),
      id_mlp_(lw_.post_norm.data(), H_, spec_.norm_eps),
      id_ex_(static_cast<size_t>(E_), RmsIdentity(lw_.post_norm.data(), H_, spec_.norm_eps)),
      counts_(static_cast<size_t>(E_), 0),
      routed_(static_cast<size_t>(E_), 0),
      delivered_(static_cast<size_t>(E_), 0),
      smp_ex_x_(static_cast<size_t>(E_)),
      smp_ex_u_(static_cast<size_t>(E_)) {
  const auto& M = spec_.moe;
  if (!moe_) dense_down_ = std::make_unique<Capture>(pre_ + "dense_down_in", L_.dense_intermediate);
  if (moe_ && M.shared_intermediate > 0)
    shared_down_ = std::make_unique<Capture>(pre_ + "shared_down_in", M.shared_intermediate);
  for (int64_t e = 0; e < E_; ++e) {
    ex_in_.push_back(
        std::make_unique<Capture>(fmt::format("{}experts.{}.gate_up_in", pre_, e), static_cast<int>(H_)));
    ex_down_.push_back(
        std::make_unique<Capture>(fmt::format("{}experts.{}.down_in", pre_, e), M.expert_intermediate));
  }
  // Chunk 0's samples: the attention of its first and last sequence at spread positions, the MLP's spread
  // rows.
  const int64_t seqs_per_chunk = std::max<int64_t>(1, st.opts.chunk_tokens / S_);
  const int64_t c0_seqs = std::min<int64_t>(seqs_per_chunk, st.n_seq);
  att_seqs_ = {0};
  if (c0_seqs > 1) att_seqs_.push_back(c0_seqs - 1);
  att_pos_ = spread(S_, kRecomputeSamples / static_cast<int64_t>(att_seqs_.size()));
  att_a_.resize(att_seqs_.size());
  att_o_.resize(att_seqs_.size());
  mlp_rows_ = spread(c0_seqs * S_, kRecomputeSamples);
}

Expected<std::unique_ptr<LayerRun>> LayerRun::create(const LayerStreamer::Impl& st, int l) {
  std::unique_ptr<LayerRun> r(new LayerRun(st, l));
  if (st.opts.device_hessians) {  // the same bits on the GPU (hessian_accum.h)
    for (Capture* c : r->all()) {
      GRIDQ_ASSIGN_OR_RETURN(c->acc, HessianAccumulator::on_device(c->acc.cols()));
    }
  }
  return r;
}

std::vector<Capture*> LayerRun::all() {
  std::vector<Capture*> v = {&attn_in_, &o_in_, &mlp_in_};
  if (dense_down_) v.push_back(dense_down_.get());
  if (shared_down_) v.push_back(shared_down_.get());
  for (int64_t e = 0; e < E_; ++e) {
    v.push_back(ex_in_[static_cast<size_t>(e)].get());
    v.push_back(ex_down_[static_cast<size_t>(e)].get());
  }
  return v;
}

int64_t LayerRun::capture_bytes() const {
  int64_t b = attn_in_.bytes() + o_in_.bytes() + mlp_in_.bytes() + (dense_down_ ? dense_down_->bytes() : 0) +
              (shared_down_ ? shared_down_->bytes() : 0);
  for (int64_t e = 0; e < E_; ++e)
    b += ex_in_[static_cast<size_t>(e)]->bytes() + ex_down_[static_cast<size_t>(e)]->bytes();
  return b;
}

int64_t LayerRun::forward_bytes(int64_t T) const {
  const auto& M = spec_.moe;
  const int64_t inter =
      std::max<int64_t>({L_.dense_intermediate, M.shared_intermediate, M.expert_intermediate});
  const int64_t kvw = int64_t{L_.n_kv_heads} * L_.head_dim;
  return T * (4 * H_ + 2 * qw_ + 2 * kvw + 2 * inter + 2 * K_) * static_cast<int64_t>(sizeof(float));
}

std::vector<HessianAccumulator*> LayerRun::accumulators() {
  std::vector<HessianAccumulator*> v;
  for (Capture* c : all()) v.push_back(&c->acc);
  return v;
}

runtime::cpu::LayerHooks LayerRun::hooks() {
  const int64_t S = S_, H = H_, qw = qw_, K = K_, E = E_;
  const std::vector<uint8_t>& holdout = st_.holdout;
  const bool weighted = st_.opts.router_weighted_hessian;
  // Rows of the chunk [T, C] to their captures, sequence by sequence.
  auto dense_rows = [this, S, &holdout](Capture& cap, const float* X, int64_t T) {
    const int64_t C = cap.acc.cols();
    for (int64_t r0 = 0; r0 < T; r0 += S) {
      const float* x = X + r0 * C;
      if (holdout[static_cast<size_t>(s0_ + r0 / S)])
        for (int64_t r = 0; r < S; ++r) cap.hold.add(x + r * C);
      else
        cap.acc.add_rows(x, S);
    }
  };
  runtime::cpu::LayerHooks hooks;
  hooks.attn_in = [this, dense_rows, S, H](const float* a, const float* h, int64_t T) {
    dense_rows(attn_in_, a, T);
    id_attn_.add(a, h, T);
    if (chunk_ == 0)
      for (size_t i = 0; i < att_seqs_.size(); ++i)
        att_a_[i].assign(a + att_seqs_[i] * S * H, a + (att_seqs_[i] + 1) * S * H);
  };
  hooks.o_in = [this, dense_rows, S, qw](const float* o, int64_t T) {
    dense_rows(o_in_, o, T);
    if (chunk_ == 0)
      for (size_t i = 0; i < att_seqs_.size(); ++i)
        for (int64_t p : att_pos_) {
          const float* row = o + (att_seqs_[i] * S + p) * qw;
          att_o_[i].insert(att_o_[i].end(), row, row + qw);
        }
  };
  hooks.mlp_in = [this, dense_rows, H](const float* a, const float* h, int64_t T) {
    dense_rows(mlp_in_, a, T);
    id_mlp_.add(a, h, T);
    h_mlp_ = h;
    if (chunk_ == 0)
      for (int64_t r : mlp_rows_) smp_a2_.insert(smp_a2_.end(), a + r * H, a + (r + 1) * H);
  };
  auto down_hook = [this, dense_rows](Capture& cap, const float* u, int64_t T) {
    dense_rows(cap, u, T);
    const int64_t C = cap.acc.cols();
    if (chunk_ == 0)
      for (int64_t r : mlp_rows_) smp_u_.insert(smp_u_.end(), u + r * C, u + (r + 1) * C);
  };
  if (dense_down_)
    hooks.dense_down_in = [this, down_hook](const float* u, int64_t T) { down_hook(*dense_down_, u, T); };
  if (shared_down_)
    hooks.shared_down_in = [this, down_hook](const float* u, int64_t T) { down_hook(*shared_down_, u, T); };
  hooks.routing = [this, S, K, &holdout](const int* idx, const float* wt, int64_t T) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j) {
        const auto e = static_cast<size_t>(idx[t * K + j]);
        ++routed_[e];
        if (!holdout[static_cast<size_t>(s0_ + t / S)]) ++counts_[e];
      }
    if (chunk_ == 0)
      for (int64_t r : mlp_rows_) {
        smp_idx_.insert(smp_idx_.end(), idx + r * K, idx + (r + 1) * K);
        smp_wt_.insert(smp_wt_.end(), wt + r * K, wt + (r + 1) * K);
      }
  };
  // Touches expert e's state only: the device teacher calls it for several experts at once.
  hooks.expert = [this, S, H, E, weighted, &holdout](int e, std::span<const int64_t> rows,
                                                     std::span<const float> wt, const float* x,
                                                     const float* u) {
    const auto ei = static_cast<size_t>(e);
    Capture& cx = *ex_in_[ei];
    Capture& cu = *ex_down_[ei];
    const int64_t I = cu.acc.cols(), n = static_cast<int64_t>(rows.size());
    delivered_[ei] += n;
    auto held = [&](int64_t i) {
      return holdout[static_cast<size_t>(s0_ + rows[static_cast<size_t>(i)] / S)] != 0;
    };
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;  // rows [i, j) share their holdout status: one call each (H sees the same rows)
      while (j < n && held(j) == held(i)) ++j;
      if (held(i)) {
        for (int64_t k = i; k < j; ++k) cx.hold.add(x + k * H), cu.hold.add(u + k * I);
      } else {
        cx.acc.add_rows(x + i * H, j - i, weighted ? &wt[static_cast<size_t>(i)] : nullptr);
        cu.acc.add_rows(u + i * I, j - i, weighted ? &wt[static_cast<size_t>(i)] : nullptr);
      }
      i = j;
    }
    id_ex_[ei].add_rows(x, h_mlp_, rows);
    if (chunk_ == 0) {
      const int64_t quota = kRecomputeSamples / E + (e < kRecomputeSamples % E ? 1 : 0);
      for (int64_t i : spread(n, quota)) {
        smp_ex_x_[ei].insert(smp_ex_x_[ei].end(), x + i * H, x + (i + 1) * H);
        smp_ex_u_[ei].insert(smp_ex_u_[ei].end(), u + i * I, u + (i + 1) * I);
      }
    }
  };
  return hooks;
}

Status LayerRun::checks(LayerCapture& out) {
  const StreamerOptions& opts = st_.opts;
  auto add_check = [&](std::string input, std::string kind, double value, double threshold) {
    out.checks.push_back(
        IdentityCheck{std::move(input), std::move(kind), value, threshold, value <= threshold});
  };
  add_check(attn_in_.name, "rmsnorm", id_attn_.delta(), opts.identity_threshold);
  add_check(mlp_in_.name, "rmsnorm", id_mlp_.delta(), opts.identity_threshold);
  for (int64_t e = 0; e < E_; ++e)
    if (id_ex_[static_cast<size_t>(e)].tokens() > 0)
      add_check(ex_in_[static_cast<size_t>(e)]->name, "rmsnorm", id_ex_[static_cast<size_t>(e)].delta(),
                opts.identity_threshold);
  {
    RelErr re;
    for (size_t i = 0; i < att_seqs_.size(); ++i)
      GRIDQ_RETURN_IF_ERROR(
          recompute_attention(spec_, lw_, l_, att_a_[i].data(), S_, att_pos_, att_o_[i].data(), re));
    add_check(o_in_.name, "recompute", re.value(), opts.recompute_threshold);
  }
  const int64_t n_smp = static_cast<int64_t>(mlp_rows_.size());
  if (dense_down_) {
    RelErr re;
    GRIDQ_RETURN_IF_ERROR(
        recompute_swiglu_input(lw_.mlp_gate, lw_.mlp_up, smp_a2_.data(), smp_u_.data(), n_smp, re));
    add_check(dense_down_->name, "recompute", re.value(), opts.recompute_threshold);
  }
  if (shared_down_) {
    RelErr re;
    GRIDQ_RETURN_IF_ERROR(
        recompute_swiglu_input(lw_.shared_gate, lw_.shared_up, smp_a2_.data(), smp_u_.data(), n_smp, re));
    add_check(shared_down_->name, "recompute", re.value(), opts.recompute_threshold);
  }
  if (!moe_) return {};
  // Each sampled expert's check is its own (one RelErr each): computed in parallel, reported in order.
  std::vector<RelErr> ex_re(static_cast<size_t>(E_));
  std::vector<Status> ex_st(static_cast<size_t>(E_));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t e = 0; e < E_; ++e) {
    const auto ei = static_cast<size_t>(e);
    const int64_t n = static_cast<int64_t>(smp_ex_x_[ei].size()) / H_;
    if (n > 0)
      ex_st[ei] = recompute_swiglu_input(lw_.expert_gate[ei], lw_.expert_up[ei], smp_ex_x_[ei].data(),
                                         smp_ex_u_[ei].data(), n, ex_re[ei]);
  }
  for (int64_t e = 0; e < E_; ++e) {
    const auto ei = static_cast<size_t>(e);
    GRIDQ_RETURN_IF_ERROR(ex_st[ei]);
    if (!smp_ex_x_[ei].empty())
      add_check(ex_down_[ei]->name, "recompute", ex_re[ei].value(), opts.recompute_threshold);
  }
  RelErr rw;
  GRIDQ_ASSIGN_OR_RETURN(int64_t mism, recompute_routing(spec_, lw_, smp_a2_.data(), n_smp, smp_idx_.data(),
                                                         smp_wt_.data(), kRouteTie, rw));
  add_check(pre_ + "router", "routing", static_cast<double>(mism), 0.0);
  add_check(pre_ + "router", "recompute", rw.value(), opts.recompute_threshold);
  // Every routing choice reached its expert, and the non-holdout counts are what entered H.
  int64_t off = 0, sum = 0, n_plain = 0;
  for (int64_t e = 0; e < E_; ++e) {
    const auto ei = static_cast<size_t>(e);
    off += std::abs(routed_[ei] - delivered_[ei]) + std::abs(counts_[ei] - ex_in_[ei]->acc.rows()) +
           std::abs(counts_[ei] - ex_down_[ei]->acc.rows());
    sum += counts_[ei];
  }
  for (int s = 0; s < st_.n_seq; ++s) n_plain += st_.holdout[static_cast<size_t>(s)] ? 0 : S_;
  off += std::abs(sum - n_plain * K_);
  add_check(pre_ + "experts", "count", static_cast<double>(off), 0.0);
  return {};
}

Status LayerRun::finish(LayerCapture& out) {
  // Every capture's statistics are independent of the others': finished in parallel, the largest first.
  out.expert_in.resize(static_cast<size_t>(E_));
  out.expert_down_in.resize(static_cast<size_t>(E_));
  std::vector<std::pair<Capture*, InputStats*>> fin = {
      {&attn_in_, &out.attn_in}, {&o_in_, &out.o_in}, {&mlp_in_, &out.mlp_in}};
  if (dense_down_) fin.emplace_back(dense_down_.get(), &out.dense_down_in);
  if (shared_down_) fin.emplace_back(shared_down_.get(), &out.shared_down_in);
  for (int64_t e = 0; e < E_; ++e) {
    fin.emplace_back(ex_in_[static_cast<size_t>(e)].get(), &out.expert_in[static_cast<size_t>(e)]);
    fin.emplace_back(ex_down_[static_cast<size_t>(e)].get(), &out.expert_down_in[static_cast<size_t>(e)]);
  }
  std::stable_sort(fin.begin(), fin.end(),
                   [](const auto& a, const auto& b) { return a.first->acc.cols() > b.first->acc.cols(); });
  const auto n_fin = static_cast<int64_t>(fin.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < n_fin; ++k)
    *fin[static_cast<size_t>(k)].second = fin[static_cast<size_t>(k)].first->finish();
  for (const Capture* c : all())
    if (!c->acc.status().ok()) return err("layer {}: {}: {}", l_, c->name, c->acc.status().message());
  out.expert_counts = counts_;
  return {};
}

}  // namespace gridq::quant

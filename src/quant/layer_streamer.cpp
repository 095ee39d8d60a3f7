// S2–S4 (quantizer.md §2): the layer-streamed BF16 teacher. The carry h [n_tok, H] (fp32) goes through one
// decoder layer at a time in chunks of whole sequences, each sequence a fresh causal context at position
// 0, by the CPU backend's own layer functions (runtime/cpu/layer_ops.h); LayerHooks route every Linear input
// into its Hessian accumulator (non-holdout rows) or holdout reservoir, and feed the S4 checks.
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "quant/capture.h"
#include "quant/hessian_accum.h"
#include "quant/identity_check.h"
#include "quant/layer_streamer_impl.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/device.h"
#include "runtime/model_weights.h"

namespace gridq::quant {

namespace {

using runtime::QMatrix;
using runtime::WeightFormat;
namespace cpu = runtime::cpu;

constexpr int kRecomputeSamples = 64;  // tokens (or token–expert pairs) per recompute check
constexpr double kRouteTie = 1e-4;     // biased-score gap below which fp32 and float64 may pick differently

// One captured input: H of the non-holdout rows, the holdout reservoir, and its RMSNorm identity.
struct Capture {
  std::string name;
  HessianAccumulator acc;
  HoldoutRows hold;
  Capture(std::string n, int cols) : name(std::move(n)), acc(cols), hold(cols) {}
  int64_t bytes() const { return acc.bytes() + hold.bytes(); }
  InputStats finish() {
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
};

bool source_format(const QMatrix& m) {
  return m.format == WeightFormat::kBF16 || m.format == WeightFormat::kF32;
}

Status check_source_formats(const runtime::ModelWeights& w) {
  auto chk = [](const QMatrix& m, int l, const char* what) -> Status {
    if (m.rows > 0 && !source_format(m))
      return err(
          "layer {} {}: format {}; the teacher forward runs the BF16 source checkpoint, not an artifact", l,
          what, runtime::format_name(m.format));
    return {};
  };
  GRIDQ_RETURN_IF_ERROR(chk(w.embed, -1, "embed"));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& lw = w.layers[l];
    const int li = static_cast<int>(l);
    for (const auto* m : {&lw.q, &lw.k, &lw.v, &lw.o, &lw.g, &lw.mlp_gate, &lw.mlp_up, &lw.mlp_down,
                          &lw.router, &lw.shared_gate, &lw.shared_up, &lw.shared_down})
      GRIDQ_RETURN_IF_ERROR(chk(*m, li, "linear"));
    for (const auto* v : {&lw.expert_gate, &lw.expert_up, &lw.expert_down})
      for (const auto& m : *v) GRIDQ_RETURN_IF_ERROR(chk(m, li, "expert"));
  }
  return {};
}

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

LayerStreamer::LayerStreamer() : impl_(std::make_unique<Impl>()) {}
LayerStreamer::~LayerStreamer() = default;

Expected<std::unique_ptr<LayerStreamer>> LayerStreamer::create(const std::string& model_dir,
                                                               const CalibSet& calib,
                                                               const StreamerOptions& opts) {
  if (calib.n_seq <= 0 || calib.seq_len <= 0 ||
      calib.ids.size() != static_cast<size_t>(calib.n_seq) * static_cast<size_t>(calib.seq_len) ||
      calib.holdout.size() != static_cast<size_t>(calib.n_seq))
    return err("layer streamer: calibration set is malformed ({} sequences of {}, {} ids, {} holdout flags)",
               calib.n_seq, calib.seq_len, calib.ids.size(), calib.holdout.size());
  if (opts.chunk_tokens <= 0)
    return err("layer streamer: chunk_tokens must be > 0 (got {})", opts.chunk_tokens);
  std::unique_ptr<LayerStreamer> st(new LayerStreamer());
  Impl& I = *st->impl_;
  GRIDQ_ASSIGN_OR_RETURN(I.lm, model::load_model(model_dir));
  GRIDQ_ASSIGN_OR_RETURN(I.w, runtime::build_model_weights(I.lm.spec, I.lm.weights));
  GRIDQ_RETURN_IF_ERROR(cpu::validate_weights(I.lm.spec, I.w));
  GRIDQ_RETURN_IF_ERROR(check_source_formats(I.w));
  if (opts.threads > 0) omp_set_num_threads(opts.threads);
  if (opts.device_forward) {
    const runtime::CudaBackendHooks* hk = runtime::cuda_backend_hooks();
    if (!hk || !hk->teacher)
      return err("layer streamer: the teacher forward on the GPU needs a gridq built with CUDA");
    GRIDQ_ASSIGN_OR_RETURN(I.teacher, hk->teacher(I.lm.spec));
  }
  I.opts = opts;
  I.n_seq = calib.n_seq;
  I.seq_len = calib.seq_len;
  I.ids = calib.ids;
  I.holdout = calib.holdout;
  const auto& spec = I.lm.spec;
  if (spec.max_position_embeddings > 0 && calib.seq_len > spec.max_position_embeddings)
    return err("layer streamer: seq_len {} exceeds max_position_embeddings {} of {}", calib.seq_len,
               spec.max_position_embeddings, model_dir);
  const int64_t H = spec.hidden_size;
  for (size_t i = 0; i < I.ids.size(); ++i)
    if (I.ids[i] < 0 || I.ids[i] >= spec.vocab_size)
      return err("layer streamer: calibration token {} at {} outside the vocabulary [0, {})", I.ids[i], i,
                 spec.vocab_size);
  // h_0: the embedding rows, exactly as the engine gathers them.
  I.carry.resize(static_cast<size_t>(I.n_tok() * H));
  for (int64_t t = 0; t < I.n_tok(); ++t)
    runtime::dequantize_row(I.w.embed, I.ids[static_cast<size_t>(t)], I.carry.data() + t * H);
  I.note_bytes(static_cast<int64_t>(I.carry.size() * sizeof(float)));
  return st;
}

const model::ModelSpec& LayerStreamer::spec() const { return impl_->lm.spec; }
int LayerStreamer::num_layers() const { return impl_->lm.spec.n_layers; }
int LayerStreamer::next_layer() const { return impl_->next; }
int64_t LayerStreamer::peak_bytes() const { return impl_->peak; }
int64_t LayerStreamer::peak_device_bytes() const {
  return impl_->teacher ? impl_->teacher->peak_device_bytes() : 0;
}
const std::vector<float>& LayerStreamer::carry() const { return impl_->carry; }
const runtime::ModelWeights& LayerStreamer::weights() const { return impl_->w; }

Expected<LayerCapture> LayerStreamer::run_layer() {
  if (impl_->failed) return err("layer streamer: a previous layer failed; the carry is not trustworthy");
  if (impl_->next >= num_layers())
    return err("layer streamer: all {} layers have run (next_layer {})", num_layers(), impl_->next);
  auto r = impl_->run(impl_->next);
  if (!r.ok()) {
    impl_->failed = true;
    return r;
  }
  ++impl_->next;
  return r;
}

Expected<LayerCapture> LayerStreamer::Impl::run(int l) {
  const auto t_start = std::chrono::steady_clock::now();
  const auto& spec = lm.spec;
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const auto& lw = w.layers[static_cast<size_t>(l)];
  const auto& M = spec.moe;
  const bool moe = L.mlp == model::MlpKind::kMoe;
  const int64_t H = spec.hidden_size, S = seq_len, qw = int64_t{L.n_heads} * L.head_dim;
  const int64_t E = moe ? M.n_experts : 0, K = moe ? M.top_k : 0;
  const std::string pre = fmt::format("layers.{}.", l);

  Capture attn_in(pre + "attn_in", static_cast<int>(H)), o_in(pre + "o_in", static_cast<int>(qw)),
      mlp_in(pre + "mlp_in", static_cast<int>(H));
  std::unique_ptr<Capture> dense_down, shared_down;
  if (!moe) dense_down = std::make_unique<Capture>(pre + "dense_down_in", L.dense_intermediate);
  if (moe && M.shared_intermediate > 0)
    shared_down = std::make_unique<Capture>(pre + "shared_down_in", M.shared_intermediate);
  std::vector<std::unique_ptr<Capture>> ex_in, ex_down;
  for (int64_t e = 0; e < E; ++e) {
    ex_in.push_back(
        std::make_unique<Capture>(fmt::format("{}experts.{}.gate_up_in", pre, e), static_cast<int>(H)));
    ex_down.push_back(
        std::make_unique<Capture>(fmt::format("{}experts.{}.down_in", pre, e), M.expert_intermediate));
  }
  std::vector<Capture*> all = {&attn_in, &o_in, &mlp_in};
  if (dense_down) all.push_back(dense_down.get());
  if (shared_down) all.push_back(shared_down.get());
  for (int64_t e = 0; e < E; ++e) {
    all.push_back(ex_in[static_cast<size_t>(e)].get());
    all.push_back(ex_down[static_cast<size_t>(e)].get());
  }
  if (opts.device_hessians) {  // the same bits on the GPU (hessian_accum.h)
    for (Capture* c : all) {
      GRIDQ_ASSIGN_OR_RETURN(c->acc, HessianAccumulator::on_device(c->acc.cols()));
    }
  }
  RmsIdentity id_attn(lw.input_norm.data(), H, spec.norm_eps), id_mlp(lw.post_norm.data(), H, spec.norm_eps);
  std::vector<RmsIdentity> id_ex(static_cast<size_t>(E), RmsIdentity(lw.post_norm.data(), H, spec.norm_eps));
  std::vector<int64_t> counts(static_cast<size_t>(E), 0);     // non-holdout routing counts
  std::vector<int64_t> routed(static_cast<size_t>(E), 0);     // all routing choices (holdout too)
  std::vector<int64_t> delivered(static_cast<size_t>(E), 0);  // rows the expert hooks received

  // Chunk-0 samples for the recompute checks.
  const int64_t seqs_per_chunk = std::max<int64_t>(1, opts.chunk_tokens / S);
  const int64_t c0_seqs = std::min<int64_t>(seqs_per_chunk, n_seq);
  std::vector<int64_t> att_seqs = {0};
  if (c0_seqs > 1) att_seqs.push_back(c0_seqs - 1);
  const std::vector<int64_t> att_pos = spread(S, kRecomputeSamples / static_cast<int64_t>(att_seqs.size()));
  std::vector<std::vector<float>> att_a(att_seqs.size()), att_o(att_seqs.size());  // [S, H], [|pos|, qw]
  const std::vector<int64_t> mlp_rows = spread(c0_seqs * S, kRecomputeSamples);
  std::vector<float> smp_a2, smp_u;  // [|mlp_rows|, H], [|mlp_rows|, D or I_s]
  std::vector<int> smp_idx;          // [|mlp_rows|, K]
  std::vector<float> smp_wt;         // [|mlp_rows|, K]
  std::vector<std::vector<float>> smp_ex_x(static_cast<size_t>(E)), smp_ex_u(static_cast<size_t>(E));

  cpu::LineVector<float> a_scratch;  // the layers' normalised inputs (cpu/scratch.h: line-aligned)
  const float* h_mlp = nullptr;      // the residual the mlp_in rows normalised (valid during the MLP)
  int64_t chunk = 0, s0 = 0;
  const bool weighted = opts.router_weighted_hessian;

  // Rows of the chunk [T, C] to their captures, sequence by sequence.
  auto dense_rows = [&](Capture& cap, const float* X, int64_t T) {
    const int64_t C = cap.acc.cols();
    for (int64_t r0 = 0; r0 < T; r0 += S) {
      const float* x = X + r0 * C;
      if (holdout[static_cast<size_t>(s0 + r0 / S)])
        for (int64_t r = 0; r < S; ++r) cap.hold.add(x + r * C);
      else
        cap.acc.add_rows(x, S);
    }
  };

  cpu::LayerHooks hooks;
  hooks.attn_in = [&](const float* a, const float* h, int64_t T) {
    dense_rows(attn_in, a, T);
    id_attn.add(a, h, T);
    if (chunk == 0)
      for (size_t i = 0; i < att_seqs.size(); ++i)
        att_a[i].assign(a + att_seqs[i] * S * H, a + (att_seqs[i] + 1) * S * H);
  };
  hooks.o_in = [&](const float* o, int64_t T) {
    dense_rows(o_in, o, T);
    if (chunk == 0)
      for (size_t i = 0; i < att_seqs.size(); ++i)
        for (int64_t p : att_pos) {
          const float* row = o + (att_seqs[i] * S + p) * qw;
          att_o[i].insert(att_o[i].end(), row, row + qw);
        }
  };
  hooks.mlp_in = [&](const float* a, const float* h, int64_t T) {
    dense_rows(mlp_in, a, T);
    id_mlp.add(a, h, T);
    h_mlp = h;
    if (chunk == 0)
      for (int64_t r : mlp_rows) smp_a2.insert(smp_a2.end(), a + r * H, a + (r + 1) * H);
  };
  auto down_hook = [&](Capture& cap, const float* u, int64_t T) {
    dense_rows(cap, u, T);
    const int64_t C = cap.acc.cols();
    if (chunk == 0)
      for (int64_t r : mlp_rows) smp_u.insert(smp_u.end(), u + r * C, u + (r + 1) * C);
  };
  if (dense_down) hooks.dense_down_in = [&](const float* u, int64_t T) { down_hook(*dense_down, u, T); };
  if (shared_down) hooks.shared_down_in = [&](const float* u, int64_t T) { down_hook(*shared_down, u, T); };
  hooks.routing = [&](const int* idx, const float* wt, int64_t T) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j) {
        const auto e = static_cast<size_t>(idx[t * K + j]);
        ++routed[e];
        if (!holdout[static_cast<size_t>(s0 + t / S)]) ++counts[e];
      }
    if (chunk == 0)
      for (int64_t r : mlp_rows) {
        smp_idx.insert(smp_idx.end(), idx + r * K, idx + (r + 1) * K);
        smp_wt.insert(smp_wt.end(), wt + r * K, wt + (r + 1) * K);
      }
  };
  // Touches expert e's state only: the device teacher calls it for several experts at once.
  hooks.expert = [&](int e, std::span<const int64_t> rows, std::span<const float> wt, const float* x,
                     const float* u) {
    const auto ei = static_cast<size_t>(e);
    Capture& cx = *ex_in[ei];
    Capture& cu = *ex_down[ei];
    const int64_t I = cu.acc.cols(), n = static_cast<int64_t>(rows.size());
    delivered[ei] += n;
    auto held = [&](int64_t i) {
      return holdout[static_cast<size_t>(s0 + rows[static_cast<size_t>(i)] / S)] != 0;
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
    id_ex[ei].add_rows(x, h_mlp, rows);
    if (chunk == 0) {
      const int64_t quota = kRecomputeSamples / E + (e < kRecomputeSamples % E ? 1 : 0);
      for (int64_t i : spread(n, quota)) {
        smp_ex_x[ei].insert(smp_ex_x[ei].end(), x + i * H, x + (i + 1) * H);
        smp_ex_u[ei].insert(smp_ex_u[ei].end(), u + i * I, u + (i + 1) * I);
      }
    }
  };

  int64_t cap_bytes = 0;
  double absorb_s = 0.0;
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (s0 = 0, chunk = 0; s0 < n_seq; s0 += seqs_per_chunk, ++chunk) {
    const int64_t ns = std::min<int64_t>(seqs_per_chunk, n_seq - s0), T = ns * S;
    std::vector<cpu::LayerCache> caches;
    if (teacher) {
      GRIDQ_RETURN_IF_ERROR(teacher->layer(l, lw, ns, S, carry.data() + s0 * S * H, &hooks));
    } else {
      caches.reserve(static_cast<size_t>(ns));
      cpu::AttnLayout lay;
      for (int64_t s = 0; s < ns; ++s) {
        caches.push_back(cpu::fresh_layer_cache(L));
        lay.seqs.push_back(cpu::AttnSeq{nullptr, 0, s * S, S});
        for (int64_t p = 0; p < S; ++p) {
          lay.pos.push_back(p);
          lay.seq_of.push_back(static_cast<size_t>(s));
        }
      }
      for (int64_t s = 0; s < ns; ++s)
        lay.seqs[static_cast<size_t>(s)].cache = &caches[static_cast<size_t>(s)];
      cpu::decoder_layer(spec, lw, l, lay, carry.data() + s0 * S * H, a_scratch, &hooks);
    }
    h_mlp = nullptr;
    // Our own buffers: the captures, the chunk's caches, and the forward's per-chunk temporaries
    // (a, q/k/v/o, residual adds, the widest MLP intermediate pair).
    cap_bytes = attn_in.bytes() + o_in.bytes() + mlp_in.bytes() + (dense_down ? dense_down->bytes() : 0) +
                (shared_down ? shared_down->bytes() : 0);
    for (int64_t e = 0; e < E; ++e)
      cap_bytes += ex_in[static_cast<size_t>(e)]->bytes() + ex_down[static_cast<size_t>(e)]->bytes();
    int64_t cache_bytes = 0;
    for (const auto& c : caches)
      cache_bytes += static_cast<int64_t>((c.k.capacity() + c.v.capacity()) * sizeof(float));
    const int64_t inter =
        std::max<int64_t>({L.dense_intermediate, M.shared_intermediate, M.expert_intermediate});
    const int64_t kvw = int64_t{L.n_kv_heads} * L.head_dim;
    const int64_t fwd =
        T * (4 * H + 2 * qw + 2 * kvw + 2 * inter + 2 * K) * static_cast<int64_t>(sizeof(float));
    note_bytes(static_cast<int64_t>(carry.size() * sizeof(float)) + cap_bytes + cache_bytes + fwd);
    // The chunk's rows into H: one accumulator per thread, the biggest first (each result is independent of
    // which thread absorbs it).
    std::vector<HessianAccumulator*> accs = {&attn_in.acc, &o_in.acc, &mlp_in.acc};
    if (dense_down) accs.push_back(&dense_down->acc);
    if (shared_down) accs.push_back(&shared_down->acc);
    for (int64_t e = 0; e < E; ++e) {
      accs.push_back(&ex_in[static_cast<size_t>(e)]->acc);
      accs.push_back(&ex_down[static_cast<size_t>(e)]->acc);
    }
    auto work = [](const HessianAccumulator* a) { return a->pending_rows() * a->cols() * a->cols(); };
    std::stable_sort(accs.begin(), accs.end(), [&](auto* x, auto* y) { return work(x) > work(y); });
    const auto n_acc = static_cast<int64_t>(accs.size());
    const auto t_abs = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < n_acc; ++k) accs[static_cast<size_t>(k)]->absorb();
    absorb_s += since(t_abs);
  }
  const auto t_checks = std::chrono::steady_clock::now();

  // ---- S4 ----
  LayerCapture out;
  out.layer = l;
  auto add_check = [&](std::string input, std::string kind, double value, double threshold) {
    out.checks.push_back(
        IdentityCheck{std::move(input), std::move(kind), value, threshold, value <= threshold});
  };
  add_check(attn_in.name, "rmsnorm", id_attn.delta(), opts.identity_threshold);
  add_check(mlp_in.name, "rmsnorm", id_mlp.delta(), opts.identity_threshold);
  for (int64_t e = 0; e < E; ++e)
    if (id_ex[static_cast<size_t>(e)].tokens() > 0)
      add_check(ex_in[static_cast<size_t>(e)]->name, "rmsnorm", id_ex[static_cast<size_t>(e)].delta(),
                opts.identity_threshold);
  {
    RelErr re;
    for (size_t i = 0; i < att_seqs.size(); ++i)
      GRIDQ_RETURN_IF_ERROR(
          recompute_attention(spec, lw, l, att_a[i].data(), S, att_pos, att_o[i].data(), re));
    add_check(o_in.name, "recompute", re.value(), opts.recompute_threshold);
  }
  const int64_t n_smp = static_cast<int64_t>(mlp_rows.size());
  if (dense_down) {
    RelErr re;
    GRIDQ_RETURN_IF_ERROR(
        recompute_swiglu_input(lw.mlp_gate, lw.mlp_up, smp_a2.data(), smp_u.data(), n_smp, re));
    add_check(dense_down->name, "recompute", re.value(), opts.recompute_threshold);
  }
  if (shared_down) {
    RelErr re;
    GRIDQ_RETURN_IF_ERROR(
        recompute_swiglu_input(lw.shared_gate, lw.shared_up, smp_a2.data(), smp_u.data(), n_smp, re));
    add_check(shared_down->name, "recompute", re.value(), opts.recompute_threshold);
  }
  if (moe) {
    // Each sampled expert's check is its own (one RelErr each): computed in parallel, reported in order.
    std::vector<RelErr> ex_re(static_cast<size_t>(E));
    std::vector<Status> ex_st(static_cast<size_t>(E));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < E; ++e) {
      const auto ei = static_cast<size_t>(e);
      const int64_t n = static_cast<int64_t>(smp_ex_x[ei].size()) / H;
      if (n > 0)
        ex_st[ei] = recompute_swiglu_input(lw.expert_gate[ei], lw.expert_up[ei], smp_ex_x[ei].data(),
                                           smp_ex_u[ei].data(), n, ex_re[ei]);
    }
    for (int64_t e = 0; e < E; ++e) {
      const auto ei = static_cast<size_t>(e);
      GRIDQ_RETURN_IF_ERROR(ex_st[ei]);
      if (!smp_ex_x[ei].empty())
        add_check(ex_down[ei]->name, "recompute", ex_re[ei].value(), opts.recompute_threshold);
    }
    RelErr rw;
    GRIDQ_ASSIGN_OR_RETURN(int64_t mism, recompute_routing(spec, lw, smp_a2.data(), n_smp, smp_idx.data(),
                                                           smp_wt.data(), kRouteTie, rw));
    add_check(pre + "router", "routing", static_cast<double>(mism), 0.0);
    add_check(pre + "router", "recompute", rw.value(), opts.recompute_threshold);
    // Every routing choice reached its expert, and the non-holdout counts are what entered H.
    int64_t off = 0, sum = 0, n_plain = 0;
    for (int64_t e = 0; e < E; ++e) {
      const auto ei = static_cast<size_t>(e);
      off += std::abs(routed[ei] - delivered[ei]) + std::abs(counts[ei] - ex_in[ei]->acc.rows()) +
             std::abs(counts[ei] - ex_down[ei]->acc.rows());
      sum += counts[ei];
    }
    for (int s = 0; s < n_seq; ++s) n_plain += holdout[static_cast<size_t>(s)] ? 0 : S;
    off += std::abs(sum - n_plain * K);
    add_check(pre + "experts", "count", static_cast<double>(off), 0.0);
  }

  out.checks_s = since(t_checks);
  out.absorb_s = absorb_s;
  const auto t_finish = std::chrono::steady_clock::now();
  // Every capture's statistics are independent of the others': finished in parallel, the largest first.
  out.expert_in.resize(static_cast<size_t>(E));
  out.expert_down_in.resize(static_cast<size_t>(E));
  std::vector<std::pair<Capture*, InputStats*>> fin = {
      {&attn_in, &out.attn_in}, {&o_in, &out.o_in}, {&mlp_in, &out.mlp_in}};
  if (dense_down) fin.emplace_back(dense_down.get(), &out.dense_down_in);
  if (shared_down) fin.emplace_back(shared_down.get(), &out.shared_down_in);
  for (int64_t e = 0; e < E; ++e) {
    fin.emplace_back(ex_in[static_cast<size_t>(e)].get(), &out.expert_in[static_cast<size_t>(e)]);
    fin.emplace_back(ex_down[static_cast<size_t>(e)].get(), &out.expert_down_in[static_cast<size_t>(e)]);
  }
  std::stable_sort(fin.begin(), fin.end(),
                   [](const auto& a, const auto& b) { return a.first->acc.cols() > b.first->acc.cols(); });
  const auto n_fin = static_cast<int64_t>(fin.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < n_fin; ++k)
    *fin[static_cast<size_t>(k)].second = fin[static_cast<size_t>(k)].first->finish();
  for (const Capture* c : all)
    if (!c->acc.status().ok()) return err("layer {}: {}: {}", l, c->name, c->acc.status().message());
  out.expert_counts = counts;
  out.finish_s = since(t_finish);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (teacher) {
    const auto ts = teacher->take_seconds();
    out.teacher_upload_s = ts.upload, out.teacher_steps_s = ts.steps, out.teacher_hooks_s = ts.hooks;
  }
  for (const IdentityCheck& c : out.checks)
    if (!c.pass)
      return err("layer {} capture check failed: {} {} = {:.6g} exceeds the threshold {:.6g}", l, c.input,
                 c.kind, c.value, c.threshold);
  return out;
}

}  // namespace gridq::quant

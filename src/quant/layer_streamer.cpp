// S2–S4 (quantizer.md §2): the layer-streamed BF16 teacher. The carry h [n_tok, H] (fp32) goes through one
// decoder layer at a time in chunks of whole sequences, each sequence a fresh causal context at position
// 0, by the CPU backend's own layer functions (runtime/cpu/layer_ops.h); LayerHooks route every Linear input
// into its Hessian accumulator (non-holdout rows) or holdout reservoir, and feed the S4 checks.
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "quant/capture.h"
#include "quant/hessian_accum.h"
#include "quant/layer_streamer_impl.h"
#include "quant/layer_streamer_run.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/device.h"
#include "runtime/model_weights.h"

namespace gridq::quant {

namespace {

using runtime::QMatrix;
using runtime::WeightFormat;
namespace cpu = runtime::cpu;

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
  const int64_t H = spec.hidden_size, S = seq_len;
  GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<LayerRun> run, LayerRun::create(*this, l));
  cpu::LayerHooks hooks = run->hooks();
  cpu::LineVector<float> a_scratch;  // the layers' normalised inputs (cpu/scratch.h: line-aligned)

  double absorb_s = 0.0;
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const int64_t seqs_per_chunk = std::max<int64_t>(1, opts.chunk_tokens / S);
  for (int64_t s0 = 0, chunk = 0; s0 < n_seq; s0 += seqs_per_chunk, ++chunk) {
    const int64_t ns = std::min<int64_t>(seqs_per_chunk, n_seq - s0), T = ns * S;
    run->begin_chunk(s0, chunk);
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
    run->end_chunk();
    // Our own buffers: the captures, the chunk's caches, and the forward's per-chunk temporaries.
    int64_t cache_bytes = 0;
    for (const auto& c : caches)
      cache_bytes += static_cast<int64_t>((c.k.capacity() + c.v.capacity()) * sizeof(float));
    note_bytes(static_cast<int64_t>(carry.size() * sizeof(float)) + run->capture_bytes() + cache_bytes +
               run->forward_bytes(T));
    // The chunk's rows into H: one accumulator per thread, the biggest first (each result is independent of
    // which thread absorbs it).
    std::vector<HessianAccumulator*> accs = run->accumulators();
    auto work = [](const HessianAccumulator* a) { return a->pending_rows() * a->cols() * a->cols(); };
    std::stable_sort(accs.begin(), accs.end(), [&](auto* x, auto* y) { return work(x) > work(y); });
    const auto n_acc = static_cast<int64_t>(accs.size());
    const auto t_abs = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < n_acc; ++k) accs[static_cast<size_t>(k)]->absorb();
    absorb_s += since(t_abs);
  }

  // ---- S4 ----
  LayerCapture out;
  out.layer = l;
  const auto t_checks = std::chrono::steady_clock::now();
  GRIDQ_RETURN_IF_ERROR(run->checks(out));
  out.checks_s = since(t_checks);
  out.absorb_s = absorb_s;
  const auto t_finish = std::chrono::steady_clock::now();
  GRIDQ_RETURN_IF_ERROR(run->finish(out));
  out.finish_s = since(t_finish);
  out.seconds = since(t_start);
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

// The forward on the device, one step of ≤ 16 rows, mirroring cpu/layer_ops.cpp: decoder_layer → attention
// → mlp (dense SwiGLU or MoE). Launches only; the numbers differ from the CPU reference where stated:
// activations between matrices are BF16 (the residual stream stays FP32), KV is BF16, and sums run in the
// kernels' fixed orders. Every kernel's work split depends on the matrix, never on the rows of the step.
#include "runtime/cuda/forward.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/linear.h"

namespace gridq::cuda {

// Phase timing for `gridq bench decode`: an event at the end of each phase; the interval since the previous
// mark is charged to the phase's name. Off (no events) in normal use.
struct CudaBackend::PhaseTimer {
  bool on = false;
  cudaStream_t s = nullptr;
  std::vector<std::pair<const char*, cudaEvent_t>> marks;
  Status mark(const char* name) {
    if (!on) return {};
    cudaEvent_t e = nullptr;
    GRIDQ_CUDA(cudaEventCreate(&e));
    marks.emplace_back(name, e);
    GRIDQ_CUDA(cudaEventRecord(e, s));
    return {};
  }
  Status finish(std::map<std::string, double>& acc) {
    if (!on || marks.empty()) return {};
    GRIDQ_CUDA(cudaEventSynchronize(marks.back().second));
    for (size_t i = 1; i < marks.size(); ++i) {
      float ms = 0.0f;
      GRIDQ_CUDA(cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second));
      acc[marks[i].first] += ms;
    }
    for (auto& m : marks) (void)cudaEventDestroy(m.second);
    marks.clear();
    return {};
  }
};

namespace {

using detail::kMaxStepRows;
using P = DevLinear::Path;

struct Ctx {
  const model::ModelSpec& spec;
  CudaBackend::Work& w;
  const WorkspaceBuffers& ws;
  cudaStream_t s;
  int T;
  detail::RowInfo rows;
  CudaBackend::PhaseTimer* timer;
};

#define GQ_LAUNCH(expr, what) \
  GRIDQ_RETURN_IF_ERROR(::gridq::cuda::cuda_status((expr), what, __FILE__, __LINE__))

Status linear(Ctx& c, const DevLinear& L, const uint16_t* x, float* y) {
  return apply_linear(L, x, c.T, y, {c.w.xin.as<uint16_t>(), c.w.xq.as<uint8_t>(), c.w.xs.as<float>()},
                      c.ws.ws, c.s);
}

// x += SwiGLU(a) for the dense MLP or the shared expert; with `out` set, the result goes there instead.
Status swiglu_block(Ctx& c, const DevSwiglu& m, const uint16_t* a, float* out_add_to) {
  const int I = m.inter;
  uint16_t* h = c.w.h.as<uint16_t>();
  if (m.fused) {
    const bool down_fp4 = m.down.path == P::kTiled && m.down.act_bits == 4;
    const uint16_t* xin = a;
    if (m.gate_up.act_bits == 4) {
      GRIDQ_RETURN_IF_ERROR(
          qdq_fp4(a, c.T, m.gate_up.cols, c.w.xin.as<uint16_t>(), c.s, detail::forward_pdl()));
      xin = c.w.xin.as<uint16_t>();
    }
    GRIDQ_RETURN_IF_ERROR(
        gemv_swiglu(m.gate_up.tiled.m, c.T, xin, h, down_fp4, c.ws.ws, c.s, detail::forward_pdl()));
    if (down_fp4) {  // h already went through the FP4 contract inside the fused kernel: plain GEMV
      GemvArgs g;
      g.w = &m.down.tiled.m;
      g.M = c.T;
      g.x = h;
      g.y = c.w.y.as<float>();
      g.out = OutType::F32;
      GRIDQ_RETURN_IF_ERROR(gemv(g, c.ws.ws, c.s, detail::forward_pdl()));
    } else {
      GRIDQ_RETURN_IF_ERROR(linear(c, m.down, h, c.w.y.as<float>()));
    }
  } else {
    GRIDQ_RETURN_IF_ERROR(linear(c, m.gate_up, a, c.w.gu.as<float>()));
    GQ_LAUNCH(detail::raw_swiglu(c.w.gu.as<float>(), m.gate_up.out_rows(), I, c.T, I, h, c.s), "swiglu");
    GRIDQ_RETURN_IF_ERROR(linear(c, m.down, h, c.w.y.as<float>()));
  }
  // y [T, out_rows] → out [T, H]: the rows beyond H are padding.
  GQ_LAUNCH(detail::raw_add(out_add_to, c.w.y.as(), false, m.down.out_rows(), c.T, c.spec.hidden_size, c.s),
            "add");
  return {};
}

Status attention(Ctx& c, const DevLayer& dl, const model::LayerSpec& L, const detail::KvView& kv) {
  const int d = L.head_dim, nh = L.n_heads, nkv = L.n_kv_heads, qw = nh * d, kvw = nkv * d;
  const uint16_t* a = c.w.a.as<uint16_t>();
  detail::RopeArgs r;
  if (dl.stacked) {
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.qkv, a, c.w.qkv.as<float>()));
    const float* base = c.w.qkv.as<float>();
    const long long ld = dl.qkv.out_rows();
    r.q_src = base, r.k_src = base + qw, r.v_src = base + qw + kvw;
    r.ld_q = r.ld_k = r.ld_v = ld;
  } else {
    float* base = c.w.qkv.as<float>();
    const long long span = static_cast<long long>(kMaxStepRows);
    float* qb = base;
    float* kb = qb + span * dl.q.out_rows();
    float* vb = kb + span * dl.k.out_rows();
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.q, a, qb));
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.k, a, kb));
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.v, a, vb));
    r.q_src = qb, r.k_src = kb, r.v_src = vb;
    r.ld_q = dl.q.out_rows(), r.ld_k = dl.k.out_rows(), r.ld_v = dl.v.out_rows();
  }
  const bool gated = L.gate != model::GateMode::kNone;
  if (gated) GRIDQ_RETURN_IF_ERROR(linear(c, dl.g, a, c.w.g.as<float>()));
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn norm+qkv+g"));
  r.T = c.T, r.nh = nh, r.nkv = nkv, r.d = d, r.rot = L.rope.rotary_dim;
  r.eps = c.spec.norm_eps, r.m = L.rope.attention_factor;
  r.q_norm = dl.q_norm, r.k_norm = dl.k_norm, r.inv_freq = dl.inv_freq;
  r.q = c.w.q.as<float>();
  r.kv = kv;
  r.rows = c.rows;
  GQ_LAUNCH(detail::raw_qk_rope_kv(r, c.s), "qk-norm + rope + kv write");
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn qk-norm+rope+kv"));
  detail::AttnArgs at;
  at.q = c.w.q.as<float>();
  at.T = c.T, at.nh = nh, at.nkv = nkv, at.d = d;
  at.window = L.attn == model::AttnKind::kSliding ? L.window : 0;
  at.max_splits = c.w.max_splits;
  at.kv = kv;
  at.rows = c.rows;
  at.partial = c.w.partial.as<float>();
  at.o = c.w.o.as<float>();
  GQ_LAUNCH(detail::raw_attention(at, c.s), "attention");
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn core"));
  const int mode = L.gate == model::GateMode::kPerHead ? 1 : L.gate == model::GateMode::kPerElement ? 2 : 0;
  GQ_LAUNCH(detail::raw_gate(c.w.o.as<float>(), c.w.g.as<float>(), gated ? dl.g.out_rows() : 0, mode, c.T, nh,
                             d, c.w.ob.as<uint16_t>(), c.s),
            "output gate");
  GRIDQ_RETURN_IF_ERROR(linear(c, dl.o, c.w.ob.as<uint16_t>(), c.w.y.as<float>()));
  GQ_LAUNCH(
      detail::raw_add(c.w.x.as<float>(), c.w.y.as(), false, dl.o.out_rows(), c.T, c.spec.hidden_size, c.s),
      "residual add");
  return c.timer->mark("attn gate+o_proj");
}

Status moe(Ctx& c, const DevLayer& dl) {
  const auto& M = c.spec.moe;
  const int H = c.spec.hidden_size, E = M.n_experts, k = M.top_k, I = M.expert_intermediate;
  const uint16_t* a = c.w.a.as<uint16_t>();
  // The router reads the FP32 normed rows (laguna.md §1.4: near-ties are real; the BF16 rounding of its
  // input would flip choices the reference makes). Always the reference matvec.
  {
    detail::RefArgs r;
    r.w = dl.router.ref;
    r.P = c.T;
    r.x_f32 = c.w.a32.as<float>();
    r.y = c.w.z.as<float>();
    r.ld_y = dl.router.rows;
    GQ_LAUNCH(detail::raw_ref_matvec(r, c.s), "router");
  }
  GQ_LAUNCH(detail::raw_route_tokens(c.w.z.as<float>(), dl.router.out_rows(), dl.router_bias, c.T, E, k,
                                     M.score == model::RouterScore::kSoftmax ? 1 : 0, M.renormalize ? 1 : 0,
                                     c.w.eid.as<int>(), c.w.ew.as<float>(), c.s),
            "route");
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("moe norm+router"));
  float* ys = c.w.ys.as<float>();
  GRIDQ_CUDA(cudaMemsetAsync(ys, 0, static_cast<size_t>(c.T) * H * 4, c.s));
  if (M.shared_intermediate > 0) GRIDQ_RETURN_IF_ERROR(swiglu_block(c, dl.shared, a, ys));
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("moe shared"));
  const DevExperts& ex = dl.experts;
  float* x = c.w.x.as<float>();
  float* out = c.w.moe_out.as<float>();
  if (ex.fused) {
    // Grouped by expert for the whole step (kernels.h grouped_moe: a pair's bits do not depend on the rest
    // of the step), then the reference combine: FP32, a token's experts in ascending id order.
    GRIDQ_RETURN_IF_ERROR(qdq_fp4(a, c.T, H, c.w.xin.as<uint16_t>(), c.s, detail::forward_pdl()));
    GroupedMoeArgs g;
    g.gate_up = &ex.gate_up.m;
    g.down = &ex.down.m;
    g.T = c.T, g.k = k, g.E = E;
    g.eid = c.w.eid.as<int>();
    g.grp = c.w.grp.as<int>();
    g.x = c.w.xin.as<uint16_t>();
    g.gu = c.w.gu.as<float>();
    g.h = c.w.h.as<uint16_t>();
    g.y = c.w.yd.as<float>();
    GRIDQ_RETURN_IF_ERROR(grouped_moe(g, c.s, detail::forward_pdl()));
    GQ_LAUNCH(detail::raw_moe_combine(c.w.yd.as<float>(), c.w.ew.as<float>(), c.T, k, H, M.routed_scaling,
                                      M.shared_intermediate > 0 ? ys : nullptr, out, c.s),
              "moe combine");
    GQ_LAUNCH(detail::raw_add(x, out, false, H, c.T, H, c.s), "residual add");
    return c.timer->mark("moe routed");
  }
  // Reference experts: every (row, chosen expert) pair on its own, then the fixed-order combine.
  const int Pn = c.T * k;
  float* gu = c.w.gu.as<float>();
  detail::RefArgs g;
  g.w = ex.gate.ref;
  g.P = Pn;
  g.ids = c.w.eid.as<int>();
  g.x = a;
  g.x_div = k;
  g.y = gu;
  g.ld_y = 2LL * I;
  GQ_LAUNCH(detail::raw_ref_matvec(g, c.s), "experts gate");
  detail::RefArgs u = g;
  u.w = ex.up.ref;
  u.y = gu + I;
  GQ_LAUNCH(detail::raw_ref_matvec(u, c.s), "experts up");
  GQ_LAUNCH(detail::raw_swiglu(gu, 2LL * I, I, Pn, I, c.w.h.as<uint16_t>(), c.s), "experts swiglu");
  detail::RefArgs dn;
  dn.w = ex.down_ref.ref;
  dn.P = Pn;
  dn.ids = c.w.eid.as<int>();
  dn.x = c.w.h.as<uint16_t>();
  dn.x_div = 1;
  dn.y = c.w.yd.as<float>();
  dn.ld_y = H;
  GQ_LAUNCH(detail::raw_ref_matvec(dn, c.s), "experts down");
  GQ_LAUNCH(detail::raw_moe_combine(c.w.yd.as<float>(), c.w.ew.as<float>(), c.T, k, H, M.routed_scaling,
                                    M.shared_intermediate > 0 ? ys : nullptr, out, c.s),
            "moe combine");
  GQ_LAUNCH(detail::raw_add(x, out, false, H, c.T, H, c.s), "residual add");
  return c.timer->mark("moe routed");
}

}  // namespace

Status CudaBackend::run_step(const Step& st, std::vector<float>* logits,
                             std::vector<runtime::SampledToken>* sampled) {
  const int T = st.T(), V = spec_.vocab_size;
  Work& w = *work_;
  std::vector<int> host(4 * kMaxStepRows, 0);
  for (int t = 0; t < T; ++t) {
    host[t] = st.ids[t], host[kMaxStepRows + t] = st.pos[t], host[2 * kMaxStepRows + t] = st.slot[t];
    host[3 * kMaxStepRows + t] = st.kv_write.empty() ? 1 : st.kv_write[static_cast<size_t>(t)];
  }
  GRIDQ_CUDA(cudaMemcpyAsync(w.rows.as(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream_));
  // A decode step (every row wants its logits) of T rows always launches the same kernels with the same
  // arguments (the step's ids, positions and slots are read from w.rows on the device), so from its second
  // occurrence it replays a captured CUDA graph: ~1 µs per node instead of ~5 µs per launch (hopper.md §1).
  // The first occurrence runs eagerly, so one-time kernel setup never happens inside a capture.
  bool decode = graphs_on_ && !timing_ && static_cast<int>(st.logit_rows.size()) == T;
  for (int t = 0; decode && t < T; ++t) decode = st.logit_rows[static_cast<size_t>(t)] == t;
  PhaseTimer timer;
  timer.on = timing_;
  timer.s = stream_;
  if (decode && graph_seen_[T]++ > 0) {
    if (!graphs_[T]) {
      GRIDQ_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      Status st_enq = enqueue_step(st, timer);
      cudaGraph_t g = nullptr;
      const cudaError_t ce = cudaStreamEndCapture(stream_, &g);
      if (!st_enq.ok()) {
        if (g) (void)cudaGraphDestroy(g);
        return st_enq;
      }
      GRIDQ_CUDA(ce);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
      (void)cudaGraphDestroy(g);
      GRIDQ_CUDA(ie);
      graphs_[T] = exec;
    }
    GRIDQ_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graphs_[T]), stream_));
  } else {
    GRIDQ_RETURN_IF_ERROR(enqueue_step(st, timer));
  }
  if (st.logit_rows.empty()) {
    GRIDQ_CUDA(cudaStreamSynchronize(stream_));
    return timer.finish(phase_ms_);
  }
  if (st.sampled) {
    GRIDQ_RETURN_IF_ERROR(sample_step(st, *sampled));
    GRIDQ_RETURN_IF_ERROR(timer.mark("final norm+lm_head+sampling"));
    return timer.finish(phase_ms_);
  }
  const int R = static_cast<int>(st.logit_rows.size());
  const size_t base = logits->size();
  logits->resize(base + static_cast<size_t>(R) * V);
  GRIDQ_CUDA(cudaMemcpy2DAsync(logits->data() + base, static_cast<size_t>(V) * 4, w.logits.as(),
                               static_cast<size_t>(dm_->lm_head.out_rows()) * 4, static_cast<size_t>(V) * 4,
                               R, cudaMemcpyDeviceToHost, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  GRIDQ_RETURN_IF_ERROR(timer.mark("final norm+lm_head+logits"));
  return timer.finish(phase_ms_);
}

// Every kernel of one step, from the embedding to the lm_head GEMV (no host copies, no synchronization: the
// same sequence is captured into the decode graphs).
Status CudaBackend::enqueue_step(const Step& st, PhaseTimer& timer) {
  const int T = st.T(), H = spec_.hidden_size;
  Work& w = *work_;
  Ctx c{spec_,
        w,
        ws_,
        stream_,
        T,
        {w.rows.as<int>() + kMaxStepRows, w.rows.as<int>() + 2 * kMaxStepRows,
         w.rows.as<int>() + 3 * kMaxStepRows},
        &timer};
  GRIDQ_RETURN_IF_ERROR(timer.mark("start"));
  GQ_LAUNCH(detail::raw_embed(dm_->embed.as<uint16_t>(), w.rows.as<int>(), T, H, w.x.as<float>(), stream_),
            "embed");
  GRIDQ_RETURN_IF_ERROR(timer.mark("embed"));
  for (int l = 0; l < spec_.n_layers; ++l) {
    const auto& L = spec_.layers[static_cast<size_t>(l)];
    const DevLayer& dl = dm_->layers[static_cast<size_t>(l)];
    detail::KvView kv;
    kv.kvw = L.n_kv_heads * L.head_dim;
    const int fi = plan_.full_index[static_cast<size_t>(l)], ri = plan_.ring_index[static_cast<size_t>(l)];
    if (fi >= 0) {
      kv.base = pages_.as<uint16_t>();
      kv.k_off = plan_.page_offset[static_cast<size_t>(fi)] / 2;
      kv.v_off = kv.k_off + static_cast<long long>(plan_.page_tokens) * kv.kvw;
      kv.page_elems = plan_.page_bytes / 2;
      kv.page_tokens = plan_.page_tokens;
      kv.page_table = page_table_.as<int>();
      kv.max_pages = max_pages_per_seq_;
    } else {
      kv.base = rings_.as<uint16_t>();
      kv.k_off = plan_.ring_offset[static_cast<size_t>(ri)] / 2;
      kv.v_off = kv.k_off + static_cast<long long>(plan_.ring_slots[static_cast<size_t>(ri)]) * kv.kvw;
      kv.page_elems = plan_.ring_bytes_per_seq / 2;
      kv.page_tokens = plan_.ring_slots[static_cast<size_t>(ri)];
      kv.sliding = 1;
    }
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>(), dl.input_norm, T, H, spec_.norm_eps,
                                      w.a.as<uint16_t>(), nullptr, stream_),
              "input_layernorm");
    GRIDQ_RETURN_IF_ERROR(attention(c, dl, L, kv));
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>(), dl.post_norm, T, H, spec_.norm_eps, w.a.as<uint16_t>(),
                                      L.mlp == model::MlpKind::kMoe ? w.a32.as<float>() : nullptr, stream_),
              "post_attention_layernorm");
    if (L.mlp == model::MlpKind::kDense) {
      GRIDQ_RETURN_IF_ERROR(swiglu_block(c, dl.mlp, w.a.as<uint16_t>(), w.x.as<float>()));
      GRIDQ_RETURN_IF_ERROR(timer.mark("dense mlp"));
    } else
      GRIDQ_RETURN_IF_ERROR(moe(c, dl));
  }
  if (st.logit_rows.empty()) return {};
  const int R = static_cast<int>(st.logit_rows.size());
  // The requested rows, normed, packed to the front of `an` (one launch when they are rows 0..R-1, as in
  // every decode step).
  bool leading = true;
  for (int i = 0; i < R; ++i) leading = leading && st.logit_rows[static_cast<size_t>(i)] == i;
  if (leading)
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>(), dm_->final_norm.as<float>(), R, H, spec_.norm_eps,
                                      w.an.as<uint16_t>(), nullptr, stream_),
              "final norm");
  for (int i = 0; !leading && i < R; ++i)
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>() + static_cast<long long>(st.logit_rows[i]) * H,
                                      dm_->final_norm.as<float>(), 1, H, spec_.norm_eps,
                                      w.an.as<uint16_t>() + static_cast<long long>(i) * H, nullptr, stream_),
              "final norm");
  Ctx lc = c;
  lc.T = R;
  return linear(lc, dm_->lm_head, w.an.as<uint16_t>(), w.logits.as<float>());
}

}  // namespace gridq::cuda

// The forward's layer ops (forward_ops.h), mirroring cpu/layer_ops.cpp: decoder_layer → attention → mlp
// (dense SwiGLU or MoE). Launches only; the numbers differ from the CPU reference where stated: activations
// between matrices are BF16 (the residual stream stays FP32), KV is BF16, attention runs on BF16 tensor
// cores, and sums run in the kernels' fixed orders. Every kernel's work split depends on the matrix, never on
// the rows of the step.
#include <algorithm>

#include "runtime/cuda/attn_splits.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/forward_ops.h"
#include "runtime/cuda/kernels/attention_tc.h"

namespace gridq::cuda::fwd {
namespace {

using P = DevLinear::Path;

void add_contract(NormContracts& n, const DevLinear& L) {
  if (L.path != DevLinear::Path::kTiled) return;
  if (L.tiled.m.format == WeightFormat::FP8)
    n.fp8 = true;
  else if (L.act_bits == 4)
    n.fp4 = true;
}

// The matrices' contract scratch (xin, xq / xs) and which rows it holds.
LinearScratch scratch(Ctx& c) {
  return {c.w.xin.as<uint16_t>(), c.w.xq.as<uint8_t>(), c.w.xs.as<float>(), &c.cc};
}

// The residual rows res [T, H] += L(x) (c.w.y is the unfused path's scratch).
Status linear_residual(Ctx& c, const DevLinear& L, const uint16_t* x, float* res) {
  return apply_linear_residual(L, x, c.T, res, c.spec.hidden_size, c.w.y.as<float>(), scratch(c), c.ws.ws,
                               c.s);
}

}  // namespace

void rewrote(Ctx& c, const void* p) {
  if (c.cc.fp4_of == p) c.cc.fp4_of = nullptr;
  if (c.cc.fp8_of == p) c.cc.fp8_of = nullptr;
}

Status fp4_copy(Ctx& c, const uint16_t* a, int cols) {
  if (c.cc.fp4_of != a)
    GRIDQ_RETURN_IF_ERROR(qdq_fp4(a, c.T, cols, c.w.xin.as<uint16_t>(), c.s, detail::forward_pdl()));
  c.cc.fp4_of = a;
  return {};
}

bool uses_scratch(const DevLinear& L) {
  return L.path == DevLinear::Path::kTiled && (L.tiled.m.format == WeightFormat::FP8 || L.act_bits == 4);
}

bool l2_on(const Ctx& c, int what) {
  return (detail::forward_l2_ahead_mask(c.T) & what) && c.pf && !c.timer->on;
}

Status l2_fork(Ctx& c) {
  GRIDQ_CUDA(cudaEventRecord(c.pf_fork, c.s));
  GRIDQ_CUDA(cudaStreamWaitEvent(c.pf, c.pf_fork, 0));
  c.pf_open = true;
  return {};
}

Status l2_ahead(Ctx& c, const DevLinear& L) {
  if (L.path == P::kTiled)
    GQ_LAUNCH(detail::raw_l2_ahead(L.tiled.m.tiles, static_cast<long long>(L.tiled.tiles.bytes()), c.pf),
              "L2 prefetch");
  else if (L.path == P::kRef)
    GQ_LAUNCH(detail::raw_l2_ahead(L.ref.data, L.ref.row_bytes * L.ref.rows * L.experts, c.pf),
              "L2 prefetch (reference layout)");
  return {};
}

Status l2_join(Ctx& c) {
  if (!c.pf_open) return {};
  GRIDQ_CUDA(cudaEventRecord(c.pf_join, c.pf));
  GRIDQ_CUDA(cudaStreamWaitEvent(c.s, c.pf_join, 0));
  c.pf_open = false;
  return {};
}

NormContracts attention_contracts(const DevLayer& dl) {
  NormContracts n;
  add_contract(n, dl.stacked ? dl.qkv : dl.q);
  return n;
}
NormContracts mlp_contracts(const DevLayer& dl, bool moe, bool shared) {
  NormContracts n;
  if (moe) {
    // The grouped experts read the FP4 QDQ of the normed rows (w4a4), or the rows themselves (w4a16).
    if (dl.experts.fused && dl.experts.fp4) n.fp4 = true;
    if (shared) add_contract(n, dl.shared.gate_up);
  } else {
    add_contract(n, dl.mlp.gate_up);
  }
  return n;
}

// y = RMSNorm(x) into c.w.a (and FP32 into a32 when given), with the contract copies the block needs.
Status norm(Ctx& c, const float* weight, const NormContracts& n, float* a32) {
  uint16_t* a = c.w.a.as<uint16_t>();
  GQ_LAUNCH(detail::raw_rmsnorm_f32_contracts(
                c.w.x.as<float>(), weight, c.T, c.spec.hidden_size, c.spec.norm_eps, a, a32,
                n.fp4 ? c.w.xin.as<uint16_t>() : nullptr, n.fp8 ? c.w.xq.as<uint8_t>() : nullptr,
                n.fp8 ? c.w.xs.as<float>() : nullptr, c.s),
            "rmsnorm");
  c.cc.fp4_of = n.fp4 ? a : nullptr;
  c.cc.fp8_of = n.fp8 ? a : nullptr;
  return {};
}

// Attention warps per CTA by the step's longest run of consecutive positions of one sequence: 8 for a
// prefill chunk of ≥ 32 rows (a tile of 128 (row, head) pairs: the split's keys are read once for twice the
// pairs of 4 warps), else 4. A decode row's pairs fit one warp's 16, but the CTA's other three warps share
// the key blocks' copies and zero fill (a quarter of the issue each). The tiles fill up either way; no bits
// change.
int attention_warps(const std::vector<int>& pos, const std::vector<int>& slot) {
  int run = 1, best = 1;
  for (size_t t = 1; t < pos.size(); ++t) {
    run = slot[t] == slot[t - 1] && pos[t] == pos[t - 1] + 1 ? run + 1 : 1;
    best = std::max(best, run);
  }
  return best >= 32 ? 8 : 4;
}

Status linear(Ctx& c, const DevLinear& L, const uint16_t* x, float* y) {
  return apply_linear(L, x, c.T, y, scratch(c), c.ws.ws, c.s);
}

// c.w.y [T, down.out_rows] (FP32; the rows beyond H are padding) = SwiGLU MLP of a: the dense MLP or the
// shared expert. With `res` (the dense MLP), res [T, H] += the MLP instead (the residual add, fused into
// down's epilogue where it can be).
Status swiglu_mlp(Ctx& c, const DevSwiglu& m, const uint16_t* a, uint16_t* h, float* res) {
  const int I = m.inter;
  auto down = [&](const uint16_t* hin) {
    return res ? linear_residual(c, m.down, hin, res) : linear(c, m.down, hin, c.w.y.as<float>());
  };
  if (m.fused) {
    const bool down_fp4 = m.down.path == P::kTiled && m.down.act_bits == 4;
    const uint16_t* xin = a;
    if (m.gate_up.act_bits == 4) {
      GRIDQ_RETURN_IF_ERROR(fp4_copy(c, a, m.gate_up.cols));
      xin = c.w.xin.as<uint16_t>();
    }
    GRIDQ_RETURN_IF_ERROR(
        gemv_swiglu(m.gate_up.tiled.m, c.T, xin, h, down_fp4, c.ws.ws, c.s, detail::forward_pdl()));
    rewrote(c, h);
    if (down_fp4) {  // h already went through the FP4 contract inside the fused kernel: plain GEMV
      GemvArgs g;
      g.w = &m.down.tiled.m;
      g.M = c.T;
      g.x = h;
      g.y = c.w.y.as<float>();
      g.out = OutType::F32;
      return res ? gemv_residual(g, res, c.spec.hidden_size, c.ws.ws, c.s)
                 : gemv(g, c.ws.ws, c.s, detail::forward_pdl());
    }
    return down(h);
  }
  GRIDQ_RETURN_IF_ERROR(linear(c, m.gate_up, a, c.w.gu.as<float>()));
  GQ_LAUNCH(detail::raw_swiglu(c.w.gu.as<float>(), m.gate_up.out_rows(), I, c.T, I, h, c.s), "swiglu");
  rewrote(c, h);
  return down(h);
}

Status attention(Ctx& c, const DevLayer& dl, const model::LayerSpec& L, const detail::KvView& kv) {
  GRIDQ_RETURN_IF_ERROR(attention_gated(c, dl, L, kv));
  GRIDQ_RETURN_IF_ERROR(linear_residual(c, dl.o, c.w.ob.as<uint16_t>(), c.w.x.as<float>()));
  return c.timer->mark("attn gate+o_proj");
}

Status attention_gated(Ctx& c, const DevLayer& dl, const model::LayerSpec& L, const detail::KvView& kv) {
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
    const long long span = static_cast<long long>(c.w.step_rows);
    float* qb = base;
    float* kb = qb + span * dl.q.out_rows();
    float* vb = kb + span * dl.k.out_rows();
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.q, a, qb));
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.k, a, kb));
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.v, a, vb));
    r.q_src = qb, r.k_src = kb, r.v_src = vb;
    r.ld_q = dl.q.out_rows(), r.ld_k = dl.k.out_rows(), r.ld_v = dl.v.out_rows();
  }
  const bool ahead_o = l2_on(c, detail::kL2AheadO);
  const bool ahead_router = dl.router.path != P::kNone && l2_on(c, detail::kL2AheadRouter);
  if (ahead_o || ahead_router) GRIDQ_RETURN_IF_ERROR(l2_fork(c));
  if (ahead_o) GRIDQ_RETURN_IF_ERROR(l2_ahead(c, dl.o));
  if (ahead_router) GRIDQ_RETURN_IF_ERROR(l2_ahead(c, dl.router));
  // g_proj (a small BF16 matrix: its GEMV is mostly fixed cost) runs on the side stream beside RoPE and
  // attention, which leave most SMs idle at decode batch sizes; forked after q/k/v so that it does not
  // compete with their GEMV. Not when it would write the contract scratch or phases are timed.
  const bool gated = L.gate != model::GateMode::kNone;
  const bool g_beside = gated && (detail::forward_beside() & detail::kBesideGate) && !c.timer->on &&
                        c.side != nullptr && c.side_ws != nullptr && !uses_scratch(dl.g);
  if (g_beside) {
    GRIDQ_CUDA(cudaEventRecord(c.fork, c.s));
    GRIDQ_CUDA(cudaStreamWaitEvent(c.side, c.fork, 0));
    GRIDQ_RETURN_IF_ERROR(apply_linear(dl.g, a, c.T, c.w.g.as<float>(), {}, c.side_ws->ws, c.side));
    GRIDQ_CUDA(cudaEventRecord(c.join, c.side));
  } else if (gated) {
    GRIDQ_RETURN_IF_ERROR(linear(c, dl.g, a, c.w.g.as<float>()));
  }
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn norm+qkv+g"));
  r.T = c.T, r.nh = nh, r.nkv = nkv, r.d = d, r.rot = L.rope.rotary_dim;
  r.eps = c.spec.norm_eps, r.m = L.rope.attention_factor;
  r.q_norm = dl.q_norm, r.k_norm = dl.k_norm, r.inv_freq = dl.inv_freq;
  r.kv = kv;
  detail::AttnArgs at;
  at.nh = nh, at.nkv = nkv, at.d = d;
  at.window = L.attn == model::AttnKind::kSliding ? L.window : 0;
  at.tile_warps = c.attn_warps;
  at.kv = kv;
  at.partial = c.w.partial.as<float>();
  // Slices of ≤ kAttnSliceRows rows in row order, each writing its K/V and then attending (a row reads only
  // keys at positions ≤ its own: the earlier slices' and its own). The rings hold window + kAttnSliceRows
  // slots, so a slice never overwrites a key a row of the same slice still needs. The split buffer holds
  // partial_slots (row, head, split) slots: a longer slice is cut where its own splits would not fit (a
  // row's splits count from its window's first: a sliding layer's slices stay whole at any position). A
  // step of one slice (every decode step, graphs included) keeps the layer's position-independent bound.
  auto splits_of = [&](int t0, int n) {
    int mx = 1;
    for (int t = t0; t < t0 + n; ++t) mx = std::max(mx, detail::attn_row_splits(at.window, c.pos_host[t]));
    return mx;
  };
  static const int sms = [] {
    const auto d = device_info();
    return d.ok() && d->sm_count > 0 ? d->sm_count : 132;
  }();
  // A step of more rows than a decode graph's runs fused items on the tensor-core path (AttnArgs::fused: no
  // split buffer, so no cut), in slices of up to kAttnFusedSliceRows rows on full layers and of one round of
  // items on sliding ones (attn_fused_slice_rows). So does a decode step whose (row, KV head) items alone
  // fill two CTAs an SM: each CTA then streams whole rows' keys, without an item start per split or the
  // merge launch (the same bits: the fold is the merge's).
  at.fused =
      detail::attention_tc_supported(d, nh, nkv) && (c.T > detail::kMaxSliceRows || c.T * nkv >= 2 * sms);
  const int slice =
      at.fused ? attn_fused_slice_rows(at.window, nh / nkv, nkv, at.tile_warps, sms) : detail::kAttnSliceRows;
  for (int t0 = 0, n = 0; t0 < c.T; t0 += n) {
    n = std::min(slice, c.T - t0);
    while (!at.fused && n > detail::kMaxSliceRows &&
           static_cast<int64_t>(n) * nh * splits_of(t0, n) > c.w.partial_slots)
      n = std::max(detail::kMaxSliceRows, n / 2);
    // (Fused items write no partials: no split count to find.)
    at.max_splits = at.fused                       ? 1
                    : c.T <= detail::kMaxSliceRows ? layer_attn_splits(at.window, c.w.max_splits)
                                                   : splits_of(t0, n);
    const detail::RowInfo rows{c.rows.pos + t0, c.rows.seq_slot + t0,
                               c.rows.kv_write ? c.rows.kv_write + t0 : nullptr};
    detail::RopeArgs rs = r;
    rs.q_src += t0 * r.ld_q, rs.k_src += t0 * r.ld_k, rs.v_src += t0 * r.ld_v;
    rs.T = n;
    rs.q = c.w.q.as<float>() + static_cast<long long>(t0) * qw;
    rs.rows = rows;
    GQ_LAUNCH(detail::raw_qk_rope_kv(rs, c.s), "qk-norm + rope + kv write");
    // (A step of several slices times its RoPE inside "attn core".)
    if (n == c.T) GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn qk-norm+rope+kv"));
    at.q = rs.q;
    at.o = c.w.o.as<float>() + static_cast<long long>(t0) * qw;
    at.T = n;
    at.rows = rows;
    GQ_LAUNCH(detail::raw_attention(at, c.s), "attention");
  }
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("attn core"));
  if (g_beside) GRIDQ_CUDA(cudaStreamWaitEvent(c.s, c.join, 0));
  const int mode = L.gate == model::GateMode::kPerHead ? 1 : L.gate == model::GateMode::kPerElement ? 2 : 0;
  uint16_t* ob = c.w.ob.as<uint16_t>();
  const long long ld_g = gated ? dl.g.out_rows() : 0;
  rewrote(c, ob);
  NormContracts o_in;
  add_contract(o_in, dl.o);
  if (o_in.fp8) {  // the gate writes o_proj's FP8 codes too
    GQ_LAUNCH(detail::raw_gate_fp8(c.w.o.as<float>(), c.w.g.as<float>(), ld_g, mode, c.T, nh, d, ob,
                                   c.w.xq.as<uint8_t>(), c.w.xs.as<float>(), c.s),
              "output gate + FP8 contract");
    c.cc.fp8_of = ob;
  } else {
    GQ_LAUNCH(detail::raw_gate(c.w.o.as<float>(), c.w.g.as<float>(), ld_g, mode, c.T, nh, d, ob, c.s),
              "output gate");
  }
  return {};
}

}  // namespace gridq::cuda::fwd

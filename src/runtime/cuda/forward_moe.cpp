// The MoE block of a layer on the device (forward_ops.h): the router, the shared expert (beside the router
// on its own stream when it can be), and the routed experts, grouped by expert for the whole step or, for
// formats without grouped kernels, the reference per-pair matvecs; then the fixed-order combine.
#include "runtime/cuda/forward_ops.h"

namespace gridq::cuda::fwd {

Status route(Ctx& c, const DevLayer& dl) {
  const auto& M = c.spec.moe;
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
  GQ_LAUNCH(detail::raw_route_tokens(c.w.z.as<float>(), dl.router.out_rows(), dl.router_bias, c.T,
                                     M.n_experts, M.top_k, M.score == model::RouterScore::kSoftmax ? 1 : 0,
                                     M.renormalize ? 1 : 0, c.w.eid.as<int>(), c.w.ew.as<float>(), c.s),
            "route");
  return {};
}

Status moe(Ctx& c, const DevLayer& dl) {
  const auto& M = c.spec.moe;
  const int H = c.spec.hidden_size, E = M.n_experts, k = M.top_k, I = M.expert_intermediate;
  const uint16_t* a = c.w.a.as<uint16_t>();
  // The shared expert runs on its own stream beside the router and the routed experts (those leave most
  // SMs idle at small batch), when it needs no contract scratch (xin / xq, which the routed experts read)
  // and phases are not being timed; its output stays in c.w.y (nothing else writes it) until the combine.
  const bool has_shared = M.shared_intermediate > 0;
  const bool beside = has_shared && (detail::forward_beside() & detail::kBesideShared) && !c.timer->on &&
                      c.side != nullptr && !uses_scratch(dl.shared.gate_up) && !uses_scratch(dl.shared.down);
  const float* shared = has_shared ? c.w.y.as<float>() : nullptr;
  const long long ld_shared = has_shared ? dl.shared.down.out_rows() : 0;
  if (beside) {
    GRIDQ_CUDA(cudaEventRecord(c.fork, c.s));
    GRIDQ_CUDA(cudaStreamWaitEvent(c.side, c.fork, 0));
    Ctx sc = c;
    sc.s = c.side;
    GRIDQ_RETURN_IF_ERROR(swiglu_mlp(sc, dl.shared, a, c.w.hs.as<uint16_t>(), nullptr));
    GRIDQ_CUDA(cudaEventRecord(c.join, c.side));
  }
  GRIDQ_RETURN_IF_ERROR(route(c, dl));
  // One fork after the router for every prefetch: the experts' read its choices.
  const bool ahead_experts = dl.experts.fused && l2_on(c, detail::kL2AheadExperts);
  const bool ahead_down = dl.experts.fused && !ahead_experts && l2_on(c, detail::kL2AheadDown);
  const bool ahead_qkv = c.next && l2_on(c, detail::kL2AheadNextQkv);
  if (ahead_experts || ahead_down || ahead_qkv) GRIDQ_RETURN_IF_ERROR(l2_fork(c));
  if (ahead_experts || ahead_down) {  // both stacks, or the down stack alone (the gate_up reads its own)
    const DevExperts& ex = dl.experts;
    const auto& first = ahead_experts ? ex.gate_up.m : ex.down.m;
    GQ_LAUNCH(detail::raw_l2_ahead_experts(c.w.eid.as<int>(), c.T * k, E, first.tiles, first.expert_stride,
                                           ahead_experts ? ex.down.m.tiles : nullptr,
                                           ahead_experts ? ex.down.m.expert_stride : 0, c.pf),
              "L2 prefetch (experts)");
  }
  if (ahead_qkv) {
    for (const DevLinear* L : {&c.next->qkv, &c.next->q, &c.next->k, &c.next->v})
      GRIDQ_RETURN_IF_ERROR(l2_ahead(c, *L));
  }
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("moe norm+router"));
  if (has_shared && !beside)
    GRIDQ_RETURN_IF_ERROR(swiglu_mlp(c, dl.shared, a, c.w.hs.as<uint16_t>(), nullptr));
  GRIDQ_RETURN_IF_ERROR(c.timer->mark("moe shared"));
  const DevExperts& ex = dl.experts;
  float* x = c.w.x.as<float>();
  if (ex.fused) {
    // Grouped by expert for the whole step (kernels.h grouped_moe: a pair's bits do not depend on the rest
    // of the step), then the reference combine: FP32, a token's experts in ascending id order.
    if (ex.fp4) GRIDQ_RETURN_IF_ERROR(fp4_copy(c, a, H));
    GroupedMoeArgs g;
    g.gate_up = &ex.gate_up.m;
    g.down = &ex.down.m;
    g.T = c.T, g.k = k, g.E = E;
    g.eid = c.w.eid.as<int>();
    g.grp = c.w.grp.as<int>();
    g.x = ex.fp4 ? c.w.xin.as<uint16_t>() : a;
    g.qdq_fp4 = ex.fp4;
    g.gu = c.w.gu.as<float>();
    g.xp = c.w.xp.as<uint16_t>();
    g.h = c.w.h.as<uint16_t>();
    g.y = c.w.yd.as<float>();
    GRIDQ_RETURN_IF_ERROR(grouped_moe(g, c.s, detail::forward_pdl()));
    if (beside) GRIDQ_CUDA(cudaStreamWaitEvent(c.s, c.join, 0));
    GRIDQ_RETURN_IF_ERROR(l2_join(c));
    GQ_LAUNCH(detail::raw_moe_combine(c.w.yd.as<float>(), c.w.ew.as<float>(), c.T, k, H, M.routed_scaling,
                                      shared, ld_shared, true, x, c.s),
              "moe combine + residual add");
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
  rewrote(c, c.w.h.as());
  detail::RefArgs dn;
  dn.w = ex.down_ref.ref;
  dn.P = Pn;
  dn.ids = c.w.eid.as<int>();
  dn.x = c.w.h.as<uint16_t>();
  dn.x_div = 1;
  dn.y = c.w.yd.as<float>();
  dn.ld_y = H;
  GQ_LAUNCH(detail::raw_ref_matvec(dn, c.s), "experts down");
  if (beside) GRIDQ_CUDA(cudaStreamWaitEvent(c.s, c.join, 0));
  GQ_LAUNCH(detail::raw_moe_combine(c.w.yd.as<float>(), c.w.ew.as<float>(), c.T, k, H, M.routed_scaling,
                                    shared, ld_shared, true, x, c.s),
            "moe combine + residual add");
  return c.timer->mark("moe routed");
}

}  // namespace gridq::cuda::fwd

// Host side of the kernel API (kernels.h): argument checks that fail closed with a message naming the
// operation and the rule, KParams setup, and cudaError_t -> Status conversion with the call site. The
// activation kernels' wrappers are in api_act.cpp, the random fills' in api_fill.cpp.
#include <algorithm>
#include <memory>
#include <string>

#include "runtime/cuda/api_launched.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda {

using namespace detail;

static_assert(Workspace::kMaxCounters == detail::kMaxCounters);
static_assert(Workspace::kMaxPartialFloats == detail::kMaxPartialFloats);

namespace {

// Below this many weight bytes per warp the split-K reduction costs more than the extra warps buy. Swept on
// the H200 with `gridq bench decode --synthetic laguna-s-2.1 --min-warp-bytes N` (session 6, batch 1 / 16):
// 2048 → 126.1 / 811 tok/s, 4096 → 132.5 / 815, 8192 → 135.3 / 832, 16384 → 136.0 / 840, 32768 → 123.0 /
// 801, 65536 → 99.3 / 718. 8192 keeps a margin from the cliff for other shapes.
long long g_min_warp_bytes = 8192;

int fmt_of(WeightFormat f) {
  return f == WeightFormat::BF16 ? kFmtBF16 : f == WeightFormat::FP8 ? kFmtFP8 : kFmtCB;
}

Status fill_params(const DeviceMatrix& w, KParams& p, const char* what) {
  if (w.tiles == nullptr) return err("{}: weight matrix has no device bytes", what);
  if (w.rows <= 0 || w.rows % 16) return err("{}: rows {} is not a positive multiple of 16", what, w.rows);
  p = KParams{};
  p.w = w.tiles;
  p.expert_stride = w.expert_stride;
  p.row_scale = w.row_scale;
  p.codebook = w.codebook;
  p.rows = w.rows;
  p.R = w.rows / 16;
  p.K = w.in;
  p.out_scale = 1.0f;
  p.max_slots = 1;
  if (w.format == WeightFormat::CB) {
    if (w.in <= 0 || w.in % 256) return err("{}: in {} is not a positive multiple of 256", what, w.in);
    if (w.codebook == nullptr) return err("{}: NVFP4-CB matrix without a device codebook", what);
    if (w.k < 12 || w.k > 24 || w.k % 2)
      return err("{}: no kernel for NVFP4_CB_K{} (built: K12/16/20/24)", what, w.k);
    if (w.layout_version != 1 && w.layout_version != 2)
      return err("{}: layout_version {} is not 1 or 2", what, w.layout_version);
    p.S = w.in / 256;
    for (int c = 0; c < 16; ++c) {
      if (w.layout_version == 2 && (w.v2_table_bf16[c] == 0 || (w.v2_table_bf16[c] & 0x8000)))
        return err("{}: v2 scale table entry {} is not a positive BF16 value", what, c);
      p.stab[c] = static_cast<int>(w.v2_table_bf16[c]) - (127 << 7);
    }
  } else {
    if (w.in <= 0 || w.in % 64) return err("{}: in {} is not a positive multiple of 64", what, w.in);
    p.S = w.in / 64;
    if (w.format == WeightFormat::FP8 && w.row_scale == nullptr)
      return err("{}: FP8 matrix without weight_scale", what);
  }
  return {};
}

Status check_ws(const Workspace& ws, long long tiles, const char* what) {
  if (ws.counters == nullptr || ws.partials == nullptr) return err("{}: workspace not allocated", what);
  if (tiles > Workspace::kMaxCounters)
    return err("{}: {} tiles exceed the workspace's {} counters", what, tiles, Workspace::kMaxCounters);
  return {};
}

// M > kMaxTokens rows: the GEMM where the format has one, else GEMV slices of kMaxTokens rows. Both give
// every row the bits of a GEMV launch (gemm_impl.cuh), so the choice is free.
cudaError_t wide(int fmt, const DeviceMatrix& w, int mode, const KParams& p, size_t x_elem, size_t y_elem,
                 cudaStream_t stream, bool pdl) {
  const cudaError_t e = raw_gemm(fmt, w.k, w.layout_version, mode, p, stream, pdl, g_min_warp_bytes);
  if (e != cudaErrorNotSupported) return e;
  const long long units = static_cast<long long>(p.R) * p.S;
  for (int t0 = 0; t0 < p.M; t0 += kMaxTokens) {
    KParams q = p;
    q.M = std::min(kMaxTokens, p.M - t0);
    q.x = static_cast<const uint8_t*>(p.x) + static_cast<size_t>(t0) * p.K * x_elem;
    if (p.xscale) q.xscale = p.xscale + t0;
    q.y = static_cast<uint8_t*>(p.y) + static_cast<size_t>(t0) * p.rows * y_elem;
    const cudaError_t es =
        raw_gemv(fmt, w.k, w.layout_version, mode, q.M > 8 ? 2 : 1, q, units, stream, pdl, g_min_warp_bytes);
    if (es != cudaSuccess) return es;
  }
  return cudaSuccess;
}

}  // namespace

void set_gemv_min_warp_bytes(long long bytes) { g_min_warp_bytes = bytes < 256 ? 256 : bytes; }
long long gemv_min_warp_bytes() { return g_min_warp_bytes; }
void set_gemv_blocks_per_sm(int n) { raw_set_blocks_per_sm(n < 0 ? 0 : n); }
int gemv_blocks_per_sm() { return raw_blocks_per_sm(); }
int gemm_split_parts(const DeviceMatrix& w, int M) {
  KParams p;
  if (!fill_params(w, p, "gemm_split_parts").ok()) return 0;
  p.M = M;
  int parts = 0;
  const cudaError_t e =
      raw_gemm_parts(fmt_of(w.format), w.k, w.layout_version, kStore, p, g_min_warp_bytes, parts);
  return e == cudaSuccess ? parts : 0;
}
void set_gemv_l2_prefetch(bool on) { raw_set_l2_prefetch(on); }
void set_gemv_chain_copy_engine(bool on) { raw_set_chain_bulk(on); }
bool gemv_chain_copy_engine() { return raw_chain_bulk(); }

Status gemv(const GemvArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl) {
  if (a.w == nullptr) return err("gemv: no weight matrix");
  GRIDQ_RETURN_IF_ERROR(check_rows(a.M, "gemv"));
  if (a.x == nullptr || a.y == nullptr) return err("gemv: null activation or output");
  const DeviceMatrix& w = *a.w;
  KParams p;
  GRIDQ_RETURN_IF_ERROR(fill_params(w, p, "gemv"));
  GRIDQ_RETURN_IF_ERROR(check_ws(ws, p.R, "gemv"));
  if (w.format == WeightFormat::FP8 && a.xscale == nullptr)
    return err("gemv: FP8 W8A8 needs the per-token activation scales");
  p.M = a.M;
  p.x = a.x;
  p.xscale = a.xscale;
  p.y = a.y;
  p.y_f32 = a.out == OutType::F32 ? 1 : 0;
  if (a.accumulate && a.out != OutType::F32) return err("gemv: accumulating needs an F32 output");
  p.y_accum = a.accumulate ? 1 : 0;
  p.counters = ws.counters;
  p.partials = ws.partials;
  const long long units = static_cast<long long>(p.R) * p.S;
  if (a.M > kMaxTokens) {
    GRIDQ_LAUNCHED(wide(fmt_of(w.format), w, kStore, p, w.format == WeightFormat::FP8 ? 1 : 2,
                        a.out == OutType::F32 ? 4 : 2, stream, pdl),
                   "gemv (GEMM rows)");
    return {};
  }
  GRIDQ_LAUNCHED(raw_gemv(fmt_of(w.format), w.k, w.layout_version, kStore, a.M > 8 ? 2 : 1, p, units, stream,
                          pdl, g_min_warp_bytes),
                 "gemv");
  return {};
}

Status gemv_chain(const ChainStep* steps, int n, const Workspace& ws, cudaStream_t stream, bool pdl) {
  static_assert(kMaxChainSteps == kMaxChainPhases);
  if (steps == nullptr || n < 1 || n > kMaxChainSteps)
    return err("gemv_chain: {} steps; a chain has 1..{}", n, kMaxChainSteps);
  if (ws.barrier == nullptr) return err("gemv_chain: workspace has no grid barrier");
  if (steps[0].w == nullptr) return err("gemv_chain step 0: no weight matrix");
  const DeviceMatrix& w0 = *steps[0].w;
  const bool swiglu = steps[0].swiglu;
  auto c = std::make_unique<ChainParams>();  // ≈ 11 KB
  c->n = n;
  c->pdl = pdl ? 1 : 0;
  c->bar = ws.barrier;
  int nt = 1;
  for (int i = 0; i < n; ++i) {
    const ChainStep& st = steps[i];
    const std::string what = "gemv_chain step " + std::to_string(i);
    if (st.w == nullptr) return err("{}: no weight matrix", what);
    const DeviceMatrix& w = *st.w;
    if (w.format != w0.format ||
        (w.format == WeightFormat::CB && (w.k != w0.k || w.layout_version != w0.layout_version)))
      return err("{}: weight format differs from step 0 (a chain runs one format; CB: one k and version)",
                 what);
    if (st.swiglu != swiglu)
      return err("{}: mixes fused gate+up and plain steps (a chain runs one kind)", what);
    GRIDQ_RETURN_IF_ERROR(check_m(st.M, what.c_str()));
    if (st.x == nullptr || st.y == nullptr) return err("{}: null activation or output", what);
    KParams& p = c->ph[i];
    GRIDQ_RETURN_IF_ERROR(fill_params(w, p, what.c_str()));
    if (swiglu) {
      if (w.format == WeightFormat::FP8)
        return err("{}: no fused FP8 kernel (BF16 and NVFP4-CB K16 v2)", what);
      if (w.rows % 32) return err("{}: rows {} is not 2·I with I a multiple of 16", what, w.rows);
      p.rows = w.rows / 2;
      p.R = p.rows / 16;
      p.qdq_fp4 = st.qdq_fp4 ? 1 : 0;
    } else {
      if (w.format == WeightFormat::FP8 && st.xscale == nullptr)
        return err("{}: FP8 W8A8 needs the per-token activation scales", what);
      p.y_f32 = st.out == OutType::F32 ? 1 : 0;
    }
    GRIDQ_RETURN_IF_ERROR(check_ws(ws, p.R, what.c_str()));
    p.M = st.M;
    p.x = st.x;
    p.xscale = st.xscale;
    p.y = st.y;
    p.counters = ws.counters;
    p.partials = ws.partials;
    if (st.M > 8) nt = 2;
  }
  GRIDQ_LAUNCHED(raw_gemv_chain(fmt_of(w0.format), w0.k, w0.layout_version, swiglu ? kSwiglu : kStore, nt, *c,
                                stream, g_min_warp_bytes),
                 "gemv_chain");
  return {};
}

Status gemv_swiglu(const DeviceMatrix& w, int M, const void* x, uint16_t* h, bool qdq, const Workspace& ws,
                   cudaStream_t stream, bool pdl) {
  GRIDQ_RETURN_IF_ERROR(check_rows(M, "gemv_swiglu"));
  if (w.rows % 32) return err("gemv_swiglu: rows {} is not 2·I with I a multiple of 16", w.rows);
  if (x == nullptr || h == nullptr) return err("gemv_swiglu: null activation or output");
  if (w.format == WeightFormat::FP8)
    return err("gemv_swiglu: no fused FP8 kernel (BF16 and NVFP4-CB K16 v2)");
  KParams p;
  GRIDQ_RETURN_IF_ERROR(fill_params(w, p, "gemv_swiglu"));
  p.rows = w.rows / 2;
  p.R = p.rows / 16;
  GRIDQ_RETURN_IF_ERROR(check_ws(ws, p.R, "gemv_swiglu"));
  p.M = M;
  p.x = x;
  p.y = h;
  p.qdq_fp4 = qdq ? 1 : 0;
  p.counters = ws.counters;
  p.partials = ws.partials;
  const long long units = static_cast<long long>(p.R) * p.S;
  if (M > kMaxTokens) {
    GRIDQ_LAUNCHED(wide(fmt_of(w.format), w, kSwiglu, p, 2, 2, stream, pdl), "gemv_swiglu (GEMM rows)");
    return {};
  }
  GRIDQ_LAUNCHED(raw_gemv(fmt_of(w.format), w.k, w.layout_version, kSwiglu, M > 8 ? 2 : 1, p, units, stream,
                          pdl, g_min_warp_bytes),
                 "gemv_swiglu");
  return {};
}

Status moe_gate_up(const MoeArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl) {
  if (a.gate_up == nullptr || a.gate_up->format != WeightFormat::CB)
    return err("moe_gate_up: routed experts must be NVFP4-CB");
  GRIDQ_RETURN_IF_ERROR(check_m(a.M, "moe_gate_up"));
  if (a.x == nullptr || a.h == nullptr || a.nslots == nullptr || a.slot_expert == nullptr)
    return err("moe_gate_up: null argument");
  if (a.max_slots < 1) return err("moe_gate_up: max_slots {} < 1", a.max_slots);
  const DeviceMatrix& w = *a.gate_up;
  if (w.rows % 32) return err("moe_gate_up: rows {} is not 2·I", w.rows);
  KParams p;
  GRIDQ_RETURN_IF_ERROR(fill_params(w, p, "moe_gate_up"));
  p.rows = w.rows / 2;
  p.R = p.rows / 16;
  GRIDQ_RETURN_IF_ERROR(check_ws(ws, static_cast<long long>(a.max_slots) * p.R, "moe_gate_up"));
  p.M = a.M;
  p.x = a.x;
  p.y = a.h;
  p.qdq_fp4 = 1;
  p.nslots = a.nslots;
  p.slot_expert = a.slot_expert;
  p.max_slots = a.max_slots;
  p.counters = ws.counters;
  p.partials = ws.partials;
  const long long units = static_cast<long long>(a.max_slots) * p.R * p.S;
  GRIDQ_LAUNCHED(raw_gemv(kFmtCB, w.k, w.layout_version, kSwiglu, a.M > 8 ? 2 : 1, p, units, stream, pdl,
                          g_min_warp_bytes),
                 "moe_gate_up (MoE kernels are built for NVFP4-CB K16 v2)");
  return {};
}

Status moe_down(const MoeArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl) {
  if (a.down == nullptr || a.down->format != WeightFormat::CB)
    return err("moe_down: routed experts must be NVFP4-CB");
  GRIDQ_RETURN_IF_ERROR(check_m(a.M, "moe_down"));
  if (a.h == nullptr || a.out == nullptr || a.nslots == nullptr || a.slot_expert == nullptr ||
      a.slot_weight == nullptr)
    return err("moe_down: null argument");
  if (a.max_slots < 1) return err("moe_down: max_slots {} < 1", a.max_slots);
  const DeviceMatrix& w = *a.down;
  KParams p;
  GRIDQ_RETURN_IF_ERROR(fill_params(w, p, "moe_down"));
  GRIDQ_RETURN_IF_ERROR(check_ws(ws, p.R, "moe_down"));
  p.M = a.M;
  p.x = a.h;
  p.y = a.out;
  p.nslots = a.nslots;
  p.slot_expert = a.slot_expert;
  p.slot_weight = a.slot_weight;
  p.max_slots = a.max_slots;
  p.out_scale = a.routed_scale;
  p.add = a.add;
  p.counters = ws.counters;
  p.partials = ws.partials;
  const long long units = static_cast<long long>(a.max_slots) * p.R * p.S;
  GRIDQ_LAUNCHED(raw_gemv(kFmtCB, w.k, w.layout_version, kMoeDown, a.M > 8 ? 2 : 1, p, units, stream, pdl,
                          g_min_warp_bytes),
                 "moe_down (MoE kernels are built for NVFP4-CB K16 v2)");
  return {};
}

// Items of 16 tiles × 64 pairs on a CTA once the step has enough pairs per expert to fill them (a prefill
// chunk), else 1 tile × 8 pairs on a warp: the same bits either way (moe_grouped_wide.cu).
bool grouped_moe_wide(const GroupedMoeArgs& a) {
  return a.wide == 1 || (a.wide < 0 && static_cast<long long>(a.T) * a.k >= 16LL * a.E);
}

Status grouped_moe(const GroupedMoeArgs& a, cudaStream_t stream, bool pdl) {
  if (a.gate_up == nullptr || a.down == nullptr) return err("grouped_moe: no expert matrices");
  for (const DeviceMatrix* m : {a.gate_up, a.down})
    if (m->format != WeightFormat::CB || m->k != 16 || m->layout_version != 2)
      return err("grouped_moe: routed experts must be NVFP4-CB K16 v2 (the kernels built for them)");
  if (a.T < 1 || a.k < 1 || a.E < 1 || a.k > a.E)
    return err("grouped_moe: T = {}, k = {}, E = {} (need T, k >= 1 and k <= E)", a.T, a.k, a.E);
  const long long P = static_cast<long long>(a.T) * a.k;
  if (group_pairs_smem_bytes(P, a.E) > 227 * 1024)
    return err("grouped_moe: {} pairs and {} experts exceed one block's sort (shared memory)", P, a.E);
  if (!a.eid || !a.grp || !a.x || !a.gu || !a.h || !a.y) return err("grouped_moe: null argument");
  const bool wide = grouped_moe_wide(a);
  if (wide && !a.xp) return err("grouped_moe: wide items need the permuted-activation scratch (xp)");
  if (a.E > 1024) return err("grouped_moe: {} experts exceed one block's scan (1024)", a.E);
  if (a.gate_up->rows % 32) return err("grouped_moe: gate_up rows {} is not 2·I", a.gate_up->rows);
  if (a.gate_up->in != a.down->rows || a.down->in != a.gate_up->rows / 2)
    return err("grouped_moe: gate_up [{}, {}] and down [{}, {}] are not [2I, H] and [H, I]", a.gate_up->rows,
               a.gate_up->in, a.down->rows, a.down->in);
  KParams gu, dn;
  GRIDQ_RETURN_IF_ERROR(fill_params(*a.gate_up, gu, "grouped_moe gate_up"));
  GRIDQ_RETURN_IF_ERROR(fill_params(*a.down, dn, "grouped_moe down"));
  gu.x = wide ? a.xp : a.x;
  gu.y = a.gu;
  dn.x = a.h;
  dn.y = a.y;
  // Narrow items of two tiles from 16 tokens a step: gate_up a gate tile with its up tile, h written by the
  // item's SwiGLU epilogue (no FP32 round trip, no SwiGLU kernel); down two adjacent tiles. Half the items,
  // each loading its pairs' activations once for two tiles. Below 16 tokens one tile an item: twice the busy
  // warps where items are fewer than warps (H100, session 30, gate_up paired: -1.9 % at batch 1, -0.8 % at 4,
  // +1.5 % at 16, +8.2 % at 64). The same bits either way.
  const bool paired = !wide && (a.paired == 1 || (a.paired < 0 && P >= 16LL * a.k));
  const bool pair_dn = paired && dn.R % 2 == 0;
  const int I = a.gate_up->rows / 2;
  const int nb = wide ? kWidePairs : 8;
  const int r_gu = wide ? (gu.R + kWideTiles - 1) / kWideTiles : (paired ? gu.R / 2 : gu.R);
  const int r_dn = wide ? (dn.R + kWideTiles - 1) / kWideTiles : (pair_dn ? dn.R / 2 : dn.R);
  GRIDQ_LAUNCHED(raw_group_pairs(a.eid, static_cast<int>(P), a.E, nb, r_gu, r_dn, a.grp, stream, pdl),
                 "grouped_moe: pair sort");
  if (wide)
    GRIDQ_LAUNCHED(raw_permute_units(a.x, a.T, a.gate_up->in, a.xp, stream, pdl),
                   "grouped_moe: activations permuted for the wide items");
  const ExpertParams pd{dn, a.grp, a.E, 1, a.down->rows, 0, pair_dn ? 1 : 0};
  if (paired) {
    KParams guh = gu;
    guh.y = a.h;
    const ExpertParams pg{guh, a.grp, a.E, a.k, I, a.qdq_fp4 ? 1 : 0, 1};
    GRIDQ_LAUNCHED(raw_grouped_experts(true, 1, pg, stream, pdl), "grouped_moe: gate_up + swiglu");
  } else {
    const ExpertParams pg{gu, a.grp, a.E, a.k, a.gate_up->rows};
    GRIDQ_LAUNCHED(
        wide ? raw_grouped_wide(true, pg, stream, pdl) : raw_grouped_experts(true, 1, pg, stream, pdl),
        "grouped_moe: gate_up");
    GRIDQ_LAUNCHED(raw_swiglu_pairs(a.gu, static_cast<int>(P), I, a.h, a.qdq_fp4, wide, stream, pdl),
                   "grouped_moe: swiglu");
  }
  GRIDQ_LAUNCHED(
      wide ? raw_grouped_wide(false, pd, stream, pdl) : raw_grouped_experts(false, 1, pd, stream, pdl),
      "grouped_moe: down");
  return {};
}

Status cb_decode_dense(const DeviceMatrix& w, uint16_t* out, cudaStream_t stream) {
  if (w.format != WeightFormat::CB) return err("cb_decode_dense: matrix is not NVFP4-CB");
  if (out == nullptr) return err("cb_decode_dense: null output");
  KParams p;
  GRIDQ_RETURN_IF_ERROR(fill_params(w, p, "cb_decode_dense"));
  GRIDQ_LAUNCHED(raw_cb_decode(w.k, w.layout_version, p, out, stream), "cb_decode_dense");
  return {};
}

}  // namespace gridq::cuda

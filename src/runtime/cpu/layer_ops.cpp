// One decoder layer of the CPU reference forward (see layer_ops.h). The arithmetic here is the engine's:
// any change to it changes every logit the engine produces, so keep the order of operations as it is.
#include "runtime/cpu/layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/cb_rows.h"
#include "runtime/cpu/mlp_ops.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

namespace {

using model::AttnKind;
using model::GateMode;

Status check_matrix(const QMatrix& m, int64_t rows, int64_t cols, const char* what, int l) {
  if (m.rows != rows || m.cols != cols)
    return err("layer {} {}: weight is [{}, {}], spec wants [{}, {}]", l, what, m.rows, m.cols, rows, cols);
  if (!m.data) return err("layer {} {}: weight has no data", l, what);
  if (m.format == WeightFormat::kFP8 && !m.row_scale)
    return err("layer {} {}: FP8 weight lacks weight_scale", l, what);
  if (m.format == WeightFormat::kCB) GRIDQ_RETURN_IF_ERROR(check_cb(m));
  if ((m.act_bits == 4 || m.act_bits == 8 || m.format == WeightFormat::kFP8) && cols % 16 != 0)
    return err("layer {} {}: input width {} is not a multiple of 16 (activation contract)", l, what, cols);
  return {};
}

}  // namespace

Status validate_weights(const model::ModelSpec& s, const ModelWeights& w) {
  const int64_t H = s.hidden_size;
  if (static_cast<int>(s.layers.size()) != s.n_layers || static_cast<int>(w.layers.size()) != s.n_layers)
    return err("spec/weights: {} layers declared, {} specs, {} weight sets", s.n_layers, s.layers.size(),
               w.layers.size());
  GRIDQ_RETURN_IF_ERROR(check_matrix(w.embed, s.vocab_size, H, "embed", -1));
  GRIDQ_RETURN_IF_ERROR(check_matrix(w.lm_head, s.vocab_size, H, "lm_head", -1));
  if (static_cast<int64_t>(w.final_norm.size()) != H)
    return err("final_norm: size {} != {}", w.final_norm.size(), H);
  for (int l = 0; l < s.n_layers; ++l) {
    const auto& L = s.layers[static_cast<size_t>(l)];
    const auto& lw = w.layers[static_cast<size_t>(l)];
    const int64_t qw = int64_t{L.n_heads} * L.head_dim, kvw = int64_t{L.n_kv_heads} * L.head_dim;
    if (L.n_kv_heads <= 0 || L.n_heads % L.n_kv_heads != 0) return err("layer {}: bad head counts", l);
    if (L.rope.rotary_dim > L.head_dim || static_cast<int>(L.rope.inv_freq.size()) != L.rope.rotary_dim / 2)
      return err("layer {}: rope inv_freq has {} entries for rotary width {}", l, L.rope.inv_freq.size(),
                 L.rope.rotary_dim);
    if (L.attn == AttnKind::kSliding && L.window <= 0)
      return err("layer {}: sliding layer without a window", l);
    if (static_cast<int64_t>(lw.input_norm.size()) != H || static_cast<int64_t>(lw.post_norm.size()) != H)
      return err("layer {}: norm sizes", l);
    if (L.qk_norm && (static_cast<int>(lw.q_norm.size()) != L.head_dim ||
                      static_cast<int>(lw.k_norm.size()) != L.head_dim))
      return err("layer {}: q/k norm sizes", l);
    GRIDQ_RETURN_IF_ERROR(check_matrix(lw.q, qw, H, "q_proj", l));
    GRIDQ_RETURN_IF_ERROR(check_matrix(lw.k, kvw, H, "k_proj", l));
    GRIDQ_RETURN_IF_ERROR(check_matrix(lw.v, kvw, H, "v_proj", l));
    GRIDQ_RETURN_IF_ERROR(check_matrix(lw.o, H, qw, "o_proj", l));
    if (L.gate != GateMode::kNone)
      GRIDQ_RETURN_IF_ERROR(
          check_matrix(lw.g, L.gate == GateMode::kPerHead ? L.n_heads : qw, H, "g_proj", l));
    if (L.mlp == model::MlpKind::kDense) {
      GRIDQ_RETURN_IF_ERROR(check_matrix(lw.mlp_gate, L.dense_intermediate, H, "mlp.gate_proj", l));
      GRIDQ_RETURN_IF_ERROR(check_matrix(lw.mlp_up, L.dense_intermediate, H, "mlp.up_proj", l));
      GRIDQ_RETURN_IF_ERROR(check_matrix(lw.mlp_down, H, L.dense_intermediate, "mlp.down_proj", l));
    } else {
      const auto& m = s.moe;
      GRIDQ_RETURN_IF_ERROR(check_matrix(lw.router, m.n_experts, H, "router", l));
      if (lw.router.format != WeightFormat::kBF16 && lw.router.format != WeightFormat::kF32)
        return err("layer {} router: format {} (the router is never quantized)", l,
                   format_name(lw.router.format));
      if (m.has_bias && static_cast<int>(lw.router_bias.size()) != m.n_experts)
        return err("layer {}: router bias size", l);
      if (static_cast<int>(lw.expert_gate.size()) != m.n_experts ||
          static_cast<int>(lw.expert_up.size()) != m.n_experts ||
          static_cast<int>(lw.expert_down.size()) != m.n_experts)
        return err("layer {}: expected {} experts", l, m.n_experts);
      for (int e = 0; e < m.n_experts; ++e) {
        GRIDQ_RETURN_IF_ERROR(
            check_matrix(lw.expert_gate[static_cast<size_t>(e)], m.expert_intermediate, H, "expert gate", l));
        GRIDQ_RETURN_IF_ERROR(
            check_matrix(lw.expert_up[static_cast<size_t>(e)], m.expert_intermediate, H, "expert up", l));
        GRIDQ_RETURN_IF_ERROR(
            check_matrix(lw.expert_down[static_cast<size_t>(e)], H, m.expert_intermediate, "expert down", l));
      }
      if (m.shared_intermediate > 0) {
        GRIDQ_RETURN_IF_ERROR(check_matrix(lw.shared_gate, m.shared_intermediate, H, "shared gate", l));
        GRIDQ_RETURN_IF_ERROR(check_matrix(lw.shared_up, m.shared_intermediate, H, "shared up", l));
        GRIDQ_RETURN_IF_ERROR(check_matrix(lw.shared_down, H, m.shared_intermediate, "shared down", l));
      }
    }
  }
  return {};
}

LayerCache fresh_layer_cache(const model::LayerSpec& L, bool bf16) {
  LayerCache c;
  c.bf16 = bf16;
  if (L.attn == AttnKind::kSliding) {
    const size_t e = static_cast<size_t>(L.window) * static_cast<size_t>(L.n_kv_heads * L.head_dim);
    const size_t n = bf16 ? (e + 1) / 2 : e;  // floats
    c.k.assign(n, 0.0f);
    c.v.assign(n, 0.0f);
  }
  return c;
}

bool on_fast_path(const LayerWeights& lw) { return lw.q.cpu_bf16_dot && have_avx512_bf16(); }

double sum_squares(const float* v, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
  return ss;
}

void rmsnorm_rows(const float* in, const float* w, int64_t T, int64_t n, float eps, float* out,
                  double (*ss)(const float*, int64_t)) {
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* v = in + t * n;
      const float var = static_cast<float>(ss(v, n) / static_cast<double>(n));
      const float inv = 1.0f / std::sqrt(var + eps);
      float* o = out + t * n;
      for (int64_t i = 0; i < n; ++i) o[i] = w[i] * (v[i] * inv);
    }
  };
  // Rows are independent: over the pool for a prompt, inline for a decode step (and inside a pool task).
  if (T * n >= 16 * 1024)
    parallel_for(T, rows);
  else
    rows(0, T);
}

void decoder_layer(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
                   float* x, LineVector<float>& a, const LayerHooks* hooks) {
  const int64_t T = lay.tokens(), H = spec.hidden_size;
  a.resize(static_cast<size_t>(T * H));
  // The layer on the fast path (--cpu-kernels bf16) takes the fast norm; its output is rounded to BF16 next.
  const auto ss = on_fast_path(lw) ? sum_squares_fast : sum_squares;
  rmsnorm_rows(x, lw.input_norm.data(), T, H, spec.norm_eps, a.data(), ss);
  if (hooks && hooks->attn_in) hooks->attn_in(a.data(), x, T);
  attention(spec, lw, l, lay, a.data(), x, hooks);
  rmsnorm_rows(x, lw.post_norm.data(), T, H, spec.norm_eps, a.data(), ss);
  if (hooks && hooks->mlp_in) hooks->mlp_in(a.data(), x, T);
  mlp(spec, lw, l, T, a.data(), x, hooks);
}

void mlp(const model::ModelSpec& spec, const LayerWeights& lw, int l, int64_t T, const float* a, float* x,
         const LayerHooks* hooks) {
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const int64_t H = spec.hidden_size;
  Scratch outs(Slot::kMlpOut, static_cast<size_t>(T * H));
  float* out = outs.data();
  if (L.mlp == model::MlpKind::kDense) {
    const int64_t D = L.dense_intermediate;
    Scratch hg(Slot::kGate, static_cast<size_t>(T * D)), hu(Slot::kUp, static_cast<size_t>(T * D));
    swiglu(lw.mlp_gate, lw.mlp_up, lw.mlp_down, a, T, out, hg.data(), hu.data());
    if (hooks && hooks->dense_down_in) hooks->dense_down_in(hg.data(), T);
  } else {
    moe(spec, lw, T, a, out, hooks);
  }
  for (int64_t i = 0; i < T * H; ++i) x[i] += out[i];
}

}  // namespace gridq::runtime::cpu

// One decoder layer of the CPU reference forward (see layer_ops.h). The arithmetic here is the engine's:
// any change to it changes every logit the engine produces, so keep the order of operations as it is.
#include "runtime/cpu/layer_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/cb_rows.h"
#include "runtime/cpu/matmul.h"
#include "runtime/router.h"

namespace gridq::runtime::cpu {

namespace {

using model::AttnKind;
using model::GateMode;

inline float silu(float z) { return z / (1.0f + std::exp(-z)); }
// torch.nn.functional.softplus (beta 1, threshold 20), fp32.
inline float softplus(float g) { return g > 20.0f ? g : std::log1p(std::exp(g)); }

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

// SwiGLU over T rows: out[T, H] = (silu(a·Gᵀ) ⊙ a·Uᵀ)·Dᵀ. On return hg [T, I] holds silu(a·Gᵀ) ⊙ a·Uᵀ (the
// down_proj input); hg and hu are caller scratch.
void swiglu(const QMatrix& g, const QMatrix& u, const QMatrix& d, const float* a, int64_t T, float* out,
            std::vector<float>& hg, std::vector<float>& hu) {
  const int64_t I = g.rows;
  hg.resize(static_cast<size_t>(T * I));
  hu.resize(static_cast<size_t>(T * I));
  matmul(g, a, T, hg.data());
  matmul(u, a, T, hu.data());
  for (size_t i = 0; i < hg.size(); ++i) hg[i] = silu(hg[i]) * hu[i];
  matmul(d, hg.data(), T, out);
}

void moe(const model::ModelSpec& spec, const LayerWeights& lw, int64_t T, const float* a, float* out,
         const LayerHooks* hooks) {
  const auto& M = spec.moe;
  const int64_t H = spec.hidden_size, E = M.n_experts, K = M.top_k;
  std::vector<float> z(static_cast<size_t>(T * E));  // [T, E] router logits, fp32
  matmul(lw.router, a, T, z.data());
  std::vector<int> idx(static_cast<size_t>(T * K));
  std::vector<float> wt(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t)
    route_token(z.data() + t * E, static_cast<int>(E),
                lw.router_bias.empty() ? nullptr : lw.router_bias.data(), static_cast<int>(K), M.score,
                M.renormalize, idx.data() + t * K, wt.data() + t * K);
  if (hooks && hooks->routing) hooks->routing(idx.data(), wt.data(), T);
  // Group tokens per expert (ascending token index) so each expert's weights are read once per forward.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> wt_of(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const auto e = static_cast<size_t>(idx[static_cast<size_t>(t * K + j)]);
      rows_of[e].push_back(t);
      wt_of[e].push_back(wt[static_cast<size_t>(t * K + j)]);
    }
  std::vector<float> routed(static_cast<size_t>(T * H), 0.0f);  // [T, H]
  std::vector<float> xe, ye, hg, hu;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[static_cast<size_t>(e)];
    const auto& ws = wt_of[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    xe.resize(static_cast<size_t>(n * H));
    ye.resize(static_cast<size_t>(n * H));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(xe.data() + i * H, a + rows[static_cast<size_t>(i)] * H,
                  static_cast<size_t>(H) * sizeof(float));
    swiglu(lw.expert_gate[static_cast<size_t>(e)], lw.expert_up[static_cast<size_t>(e)],
           lw.expert_down[static_cast<size_t>(e)], xe.data(), n, ye.data(), hg, hu);
    if (hooks && hooks->expert) hooks->expert(static_cast<int>(e), rows, ws, xe.data(), hg.data());
    for (int64_t i = 0; i < n; ++i) {
      const float w = ws[static_cast<size_t>(i)];
      float* r = routed.data() + rows[static_cast<size_t>(i)] * H;
      const float* y = ye.data() + i * H;
      for (int64_t c = 0; c < H; ++c) r[c] += y[c] * w;
    }
  }
  if (M.shared_intermediate > 0) {
    swiglu(lw.shared_gate, lw.shared_up, lw.shared_down, a, T, out, hg, hu);
    if (hooks && hooks->shared_down_in) hooks->shared_down_in(hg.data(), T);
    for (size_t i = 0; i < routed.size(); ++i) out[i] = routed[i] * M.routed_scaling + out[i];
  } else {
    for (size_t i = 0; i < routed.size(); ++i)
      out[i] = M.routed_scaling == 1.0f ? routed[i] : routed[i] * M.routed_scaling;
  }
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

LayerCache fresh_layer_cache(const model::LayerSpec& L) {
  LayerCache c;
  if (L.attn == AttnKind::kSliding) {
    const size_t n = static_cast<size_t>(L.window) * static_cast<size_t>(L.n_kv_heads * L.head_dim);
    c.k.assign(n, 0.0f);
    c.v.assign(n, 0.0f);
  }
  return c;
}

void rmsnorm_rows(const float* in, const float* w, int64_t T, int64_t n, float eps, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const float* v = in + t * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
    const float var = static_cast<float>(ss / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(var + eps);
    float* o = out + t * n;
    for (int64_t i = 0; i < n; ++i) o[i] = w[i] * (v[i] * inv);
  }
}

void decoder_layer(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
                   float* x, std::vector<float>& a, const LayerHooks* hooks) {
  const int64_t T = lay.tokens(), H = spec.hidden_size;
  a.resize(static_cast<size_t>(T * H));
  rmsnorm_rows(x, lw.input_norm.data(), T, H, spec.norm_eps, a.data());
  if (hooks && hooks->attn_in) hooks->attn_in(a.data(), x, T);
  attention(spec, lw, l, lay, a.data(), x, hooks);
  rmsnorm_rows(x, lw.post_norm.data(), T, H, spec.norm_eps, a.data());
  if (hooks && hooks->mlp_in) hooks->mlp_in(a.data(), x, T);
  mlp(spec, lw, l, T, a.data(), x, hooks);
}

void attention(const model::ModelSpec& spec, const LayerWeights& lw, int l, const AttnLayout& lay,
               const float* a, float* x, const LayerHooks* hooks) {
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const int64_t T = lay.tokens();
  const int64_t H = spec.hidden_size, d = L.head_dim, nh = L.n_heads, nkv = L.n_kv_heads;
  const int64_t qw = nh * d, kvw = nkv * d;
  std::vector<float> q(static_cast<size_t>(T * qw)), k(static_cast<size_t>(T * kvw)),
      v(static_cast<size_t>(T * kvw));
  matmul(lw.q, a, T, q.data());
  matmul(lw.k, a, T, k.data());
  matmul(lw.v, a, T, v.data());
  std::vector<float> g;
  if (L.gate != GateMode::kNone) {
    g.resize(static_cast<size_t>(T * lw.g.rows));
    matmul(lw.g, a, T, g.data());
  }
  // QK norm before RoPE, then RoPE (NeoX rotate-half on the first r dims, m on cos and sin).
  if (L.qk_norm) {
    rmsnorm_rows(q.data(), lw.q_norm.data(), T * nh, d, spec.norm_eps, q.data());
    rmsnorm_rows(k.data(), lw.k_norm.data(), T * nkv, d, spec.norm_eps, k.data());
  }
  const int64_t r = L.rope.rotary_dim, half = r / 2;
  const float m = L.rope.attention_factor;
  {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = 0; t < T; ++t) {
      const float p = static_cast<float>(lay.pos[static_cast<size_t>(t)]);
      for (int64_t i = 0; i < half; ++i) {
        const float ang = p * L.rope.inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = std::cos(ang) * m;
        sn[static_cast<size_t>(i)] = std::sin(ang) * m;
      }
      auto rot = [&](float* u) {
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = u[i], x2 = u[i + half];
          u[i] = x1 * cs[static_cast<size_t>(i)] - x2 * sn[static_cast<size_t>(i)];
          u[i + half] = x2 * cs[static_cast<size_t>(i)] + x1 * sn[static_cast<size_t>(i)];
        }
      };
      for (int64_t h = 0; h < nh; ++h) rot(q.data() + t * qw + h * d);
      for (int64_t h = 0; h < nkv; ++h) rot(k.data() + t * kvw + h * d);
    }
  }
  // Full layers: append this call's keys first, then every query reads the cache.
  const bool sliding = L.attn == AttnKind::kSliding;
  const int64_t W = L.window;
  if (!sliding) {
    for (const AttnSeq& s : lay.seqs) {
      auto& c = *s.cache;
      const int64_t p0 = s.past, n = s.n;
      if (const PagedKv& pg = c.paged; pg.pages) {
        for (int64_t j = std::max(p0, pg.write_floor); j < p0 + n; ++j) {
          float* page = (*pg.pages)[static_cast<size_t>(j / pg.page_tokens)];
          const int64_t slot = (j % pg.page_tokens) * kvw, row = (s.start + j - p0) * kvw;
          std::memcpy(page + pg.k_off + slot, k.data() + row, static_cast<size_t>(kvw) * sizeof(float));
          std::memcpy(page + pg.v_off + slot, v.data() + row, static_cast<size_t>(kvw) * sizeof(float));
        }
        continue;
      }
      c.k.resize(static_cast<size_t>((p0 + n) * kvw));
      c.v.resize(static_cast<size_t>((p0 + n) * kvw));
      std::memcpy(c.k.data() + p0 * kvw, k.data() + s.start * kvw,
                  static_cast<size_t>(n * kvw) * sizeof(float));
      std::memcpy(c.v.data() + p0 * kvw, v.data() + s.start * kvw,
                  static_cast<size_t>(n * kvw) * sizeof(float));
    }
  }
  std::vector<float> o(static_cast<size_t>(T * qw));  // [T, n_h*d]
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t group = nh / nkv;
#pragma omp parallel
  {
    std::vector<float> sc;
#pragma omp for schedule(dynamic, 4)
    for (int64_t th = 0; th < T * nh; ++th) {
      const int64_t t = th / nh, h = th % nh, kvh = h / group;
      const AttnSeq& S = lay.seqs[lay.seq_of[static_cast<size_t>(t)]];
      const LayerCache& c = *S.cache;
      const int64_t p = lay.pos[static_cast<size_t>(t)], p0 = S.past, t0 = S.start;
      const int64_t j0 = sliding ? std::max<int64_t>(0, p - W + 1) : 0;
      const PagedKv& pg = c.paged;
      auto paged = [&](int64_t j, int64_t off) -> const float* {
        return (*pg.pages)[static_cast<size_t>(j / pg.page_tokens)] + off + (j % pg.page_tokens) * kvw +
               kvh * d;
      };
      auto key = [&](int64_t j) -> const float* {
        if (!sliding && pg.pages) return paged(j, pg.k_off);
        if (!sliding) return c.k.data() + j * kvw + kvh * d;
        if (j >= p0) return k.data() + (t0 + j - p0) * kvw + kvh * d;
        return c.k.data() + (j % W) * kvw + kvh * d;
      };
      auto val = [&](int64_t j) -> const float* {
        if (!sliding && pg.pages) return paged(j, pg.v_off);
        if (!sliding) return c.v.data() + j * kvw + kvh * d;
        if (j >= p0) return v.data() + (t0 + j - p0) * kvw + kvh * d;
        return c.v.data() + (j % W) * kvw + kvh * d;
      };
      const float* qh = q.data() + t * qw + h * d;
      const int64_t nk = p - j0 + 1;
      sc.resize(static_cast<size_t>(nk));
      float mx = -INFINITY;
      int64_t j = 0;
      for (; j + 4 <= nk; j += 4) {  // four keys per pass: the same dots, x read once
        const float* ks[4] = {key(j0 + j), key(j0 + j + 1), key(j0 + j + 2), key(j0 + j + 3)};
        float s4[4];
        dot4(qh, ks, d, s4);
        for (int i = 0; i < 4; ++i) {
          sc[static_cast<size_t>(j + i)] = s4[i] * scale;
          mx = std::max(mx, sc[static_cast<size_t>(j + i)]);
        }
      }
      for (; j < nk; ++j) {
        sc[static_cast<size_t>(j)] = dot(qh, key(j0 + j), d) * scale;
        mx = std::max(mx, sc[static_cast<size_t>(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < nk; ++j)
        sum += (sc[static_cast<size_t>(j)] = std::exp(sc[static_cast<size_t>(j)] - mx));
      float* oh = o.data() + t * qw + h * d;
      std::fill(oh, oh + d, 0.0f);
      for (int64_t jj = 0; jj < nk; ++jj) axpy(sc[static_cast<size_t>(jj)] / sum, val(j0 + jj), oh, d);
    }
  }
  // Sliding layers: the call's last W keys enter the ring after every query has read the old ones.
  if (sliding) {
    for (const AttnSeq& s : lay.seqs) {
      auto& c = *s.cache;
      const int64_t p0 = s.past, n = s.n;
      for (int64_t j = std::max(p0, p0 + n - W); j < p0 + n; ++j) {
        const int64_t row = s.start + (j - p0);
        std::memcpy(c.k.data() + (j % W) * kvw, k.data() + row * kvw,
                    static_cast<size_t>(kvw) * sizeof(float));
        std::memcpy(c.v.data() + (j % W) * kvw, v.data() + row * kvw,
                    static_cast<size_t>(kvw) * sizeof(float));
      }
    }
  }
  // Output gate: softplus in fp32, per head or per element.
  if (L.gate == GateMode::kPerHead) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const float gs = softplus(g[static_cast<size_t>(t * nh + h)]);
        float* oh = o.data() + t * qw + h * d;
        for (int64_t e = 0; e < d; ++e) oh[e] *= gs;
      }
  } else if (L.gate == GateMode::kPerElement) {
    for (size_t i = 0; i < o.size(); ++i) o[i] *= softplus(g[i]);
  }
  if (hooks && hooks->o_in) hooks->o_in(o.data(), T);
  std::vector<float> out(static_cast<size_t>(T * H));
  matmul(lw.o, o.data(), T, out.data());
  for (size_t i = 0; i < out.size(); ++i) x[i] += out[i];
}

void mlp(const model::ModelSpec& spec, const LayerWeights& lw, int l, int64_t T, const float* a, float* x,
         const LayerHooks* hooks) {
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const int64_t H = spec.hidden_size;
  std::vector<float> out(static_cast<size_t>(T * H));
  if (L.mlp == model::MlpKind::kDense) {
    std::vector<float> hg, hu;
    swiglu(lw.mlp_gate, lw.mlp_up, lw.mlp_down, a, T, out.data(), hg, hu);
    if (hooks && hooks->dense_down_in) hooks->dense_down_in(hg.data(), T);
  } else {
    moe(spec, lw, T, a, out.data(), hooks);
  }
  for (size_t i = 0; i < out.size(); ++i) x[i] += out[i];
}

}  // namespace gridq::runtime::cpu

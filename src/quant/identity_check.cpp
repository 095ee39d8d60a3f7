// S4 capture checks (see identity_check.h). Everything here is plain scalar float64 on weights widened
// here, deliberately slow and simple: it is the independent witness for the fp32 CPU forward.
#include "quant/identity_check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

namespace gridq::quant {

using runtime::QMatrix;
using runtime::WeightFormat;

namespace {

// The whole matrix as float64 [rows, cols]; only the source formats (BF16/F32) are accepted.
Expected<std::vector<double>> widen(const QMatrix& m, const char* what) {
  if (!m.data) return err("identity check: {} has no data", what);
  std::vector<double> out(static_cast<size_t>(m.rows * m.cols));
  const auto n = static_cast<int64_t>(out.size());
  if (m.format == WeightFormat::kBF16) {
    const auto* p = static_cast<const uint16_t*>(m.data);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(p[i]) << 16);
  } else if (m.format == WeightFormat::kF32) {
    const auto* p = static_cast<const float*>(m.data);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    return err("identity check: {} is {}; the reference reads only BF16/F32 source weights", what,
               runtime::format_name(m.format));
  }
  return out;
}

// y[r] = Σ_c W[r, c] x[c] for W [R, C] float64.
void matvec(const std::vector<double>& W, int64_t R, int64_t C, const double* x, double* y) {
  for (int64_t r = 0; r < R; ++r) {
    const double* w = W.data() + r * C;
    double s[4] = {0.0, 0.0, 0.0,
                   0.0};  // four partial sums: float64 has digits to spare, and it is 3x faster
    int64_t c = 0;
    for (; c + 4 <= C; c += 4)
      for (int k = 0; k < 4; ++k) s[k] += w[c + k] * x[c + k];
    for (; c < C; ++c) s[0] += w[c] * x[c];
    y[r] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}

std::vector<double> to_f64(const float* x, int64_t n) { return std::vector<double>(x, x + n); }

// Per-head RMSNorm (eps) with weight w [d], in place on v [d].
void head_norm(double* v, int64_t d, const std::vector<float>& w, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < d; ++i) ss += v[i] * v[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
  for (int64_t i = 0; i < d; ++i) v[i] = v[i] * inv * w[static_cast<size_t>(i)];
}

// NeoX rotate-half on the first r dims of v [d] at position p, scaled by the attention factor m.
void rope(double* v, int64_t p, const model::RopeParams& rp) {
  const int64_t half = rp.rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double ang = static_cast<double>(p) * static_cast<double>(rp.inv_freq[static_cast<size_t>(i)]);
    const double c = std::cos(ang) * rp.attention_factor, s = std::sin(ang) * rp.attention_factor;
    const double x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

double softplus(double g) { return g > 20.0 ? g : std::log1p(std::exp(g)); }

}  // namespace

RmsIdentity::RmsIdentity(const float* w, int64_t cols, float eps) : cols_(cols), eps_(eps) {
  double mx = 0.0;
  for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, std::abs(static_cast<double>(w[j])));
  inv_w_.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t j = 0; j < cols; ++j)
    if (std::abs(static_cast<double>(w[j])) >= 1e-3 * mx && w[j] != 0.0f) {
      inv_w_[static_cast<size_t>(j)] = 1.0 / static_cast<double>(w[j]);
      ++used_;
    }
}

void RmsIdentity::add_one(const float* x, const float* h) {
  if (used_ == 0) return;
  double r = 0.0;
  for (int64_t j = 0; j < cols_; ++j) {
    const double v = x[j] * inv_w_[static_cast<size_t>(j)];
    r += v * v;
  }
  r /= static_cast<double>(used_);
  double rho = 1.0;
  if (h) {
    double m_all = 0.0, m_used = 0.0;
    for (int64_t j = 0; j < cols_; ++j) {
      const double v = static_cast<double>(h[j]) * h[j];
      m_all += v;
      if (inv_w_[static_cast<size_t>(j)] != 0.0) m_used += v;
    }
    m_all /= static_cast<double>(cols_);
    m_used /= static_cast<double>(used_);
    rho = m_used / (m_all + eps_);
  }
  sum_ += std::abs(r - rho);
  ++n_;
}

void RmsIdentity::add(const float* X, const float* h, int64_t T) {
  for (int64_t t = 0; t < T; ++t) add_one(X + t * cols_, h ? h + t * cols_ : nullptr);
}

void RmsIdentity::add_rows(const float* X, const float* h, std::span<const int64_t> rows) {
  for (size_t i = 0; i < rows.size(); ++i)
    add_one(X + static_cast<int64_t>(i) * cols_, h ? h + rows[i] * cols_ : nullptr);
}

double rmsnorm_identity_delta(const float* X, const float* h, int64_t T, int64_t cols, const float* w,
                              float eps) {
  RmsIdentity id(w, cols, eps);
  id.add(X, h, T);
  return id.delta();
}

Status recompute_attention(const model::ModelSpec& spec, const runtime::LayerWeights& lw, int l,
                           const float* a, int64_t n_ctx, std::span<const int64_t> positions, const float* o,
                           RelErr& out) {
  const auto& L = spec.layers[static_cast<size_t>(l)];
  const int64_t H = spec.hidden_size, d = L.head_dim, nh = L.n_heads, nkv = L.n_kv_heads;
  const int64_t qw = nh * d, kvw = nkv * d, group = nh / nkv;
  const double eps = spec.norm_eps;
  GRIDQ_ASSIGN_OR_RETURN(auto Wq, widen(lw.q, "q_proj"));
  GRIDQ_ASSIGN_OR_RETURN(auto Wk, widen(lw.k, "k_proj"));
  GRIDQ_ASSIGN_OR_RETURN(auto Wv, widen(lw.v, "v_proj"));
  std::vector<double> Wg;
  if (L.gate != model::GateMode::kNone) {
    GRIDQ_ASSIGN_OR_RETURN(Wg, widen(lw.g, "g_proj"));
  }
  const bool sliding = L.attn == model::AttnKind::kSliding;
  // The matrix-vector products first, each row its own computation (so in parallel, the same numbers): the
  // key/value rows the positions read (K, V [n_ctx, kvw]), then every position's q and gate rows.
  for (int64_t p : positions)
    if (p < 0 || p >= n_ctx)
      return err("identity check: sampled position {} outside the context of {}", p, n_ctx);
  std::vector<double> K(static_cast<size_t>(n_ctx * kvw)), V(static_cast<size_t>(n_ctx * kvw));
  std::vector<char> need(static_cast<size_t>(n_ctx), 0);
  for (int64_t p : positions)
    for (int64_t j = sliding ? std::max<int64_t>(0, p - L.window + 1) : 0; j <= p; ++j)
      need[static_cast<size_t>(j)] = 1;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t j = 0; j < n_ctx; ++j) {
    if (!need[static_cast<size_t>(j)]) continue;
    const auto x = to_f64(a + j * H, H);
    double* kj = K.data() + j * kvw;
    matvec(Wk, kvw, H, x.data(), kj);
    matvec(Wv, kvw, H, x.data(), V.data() + j * kvw);
    for (int64_t h = 0; h < nkv; ++h) {
      if (L.qk_norm) head_norm(kj + h * d, d, lw.k_norm, eps);
      rope(kj + h * d, j, L.rope);
    }
  }
  const auto n_pos = static_cast<int64_t>(positions.size());
  const int64_t gw = Wg.empty() ? 0 : lw.g.rows;
  std::vector<double> Q(static_cast<size_t>(n_pos * qw)), G(static_cast<size_t>(n_pos * gw)), sc;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < n_pos; ++s) {
    const auto x = to_f64(a + positions[static_cast<size_t>(s)] * H, H);
    matvec(Wq, qw, H, x.data(), Q.data() + s * qw);
    if (gw > 0) matvec(Wg, gw, H, x.data(), G.data() + s * gw);
  }
  for (size_t s = 0; s < positions.size(); ++s) {
    const int64_t p = positions[s];
    const double* g = G.data() + static_cast<int64_t>(s) * gw;
    const int64_t j0 = sliding ? std::max<int64_t>(0, p - L.window + 1) : 0;
    for (int64_t h = 0; h < nh; ++h) {
      double* qh = Q.data() + static_cast<int64_t>(s) * qw + h * d;
      if (L.qk_norm) head_norm(qh, d, lw.q_norm, eps);
      rope(qh, p, L.rope);
      const int64_t kvh = h / group;
      sc.assign(static_cast<size_t>(p - j0 + 1), 0.0);
      double mx = -INFINITY;
      for (int64_t j = j0; j <= p; ++j) {
        const double* kj = K.data() + j * kvw + kvh * d;
        double s2 = 0.0;
        for (int64_t e = 0; e < d; ++e) s2 += qh[e] * kj[e];
        sc[static_cast<size_t>(j - j0)] = s2 / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, sc[static_cast<size_t>(j - j0)]);
      }
      double z = 0.0;
      for (auto& v : sc) z += (v = std::exp(v - mx));
      for (int64_t e = 0; e < d; ++e) {
        double acc = 0.0;
        for (int64_t j = j0; j <= p; ++j)
          acc += sc[static_cast<size_t>(j - j0)] * V[static_cast<size_t>(j * kvw + kvh * d + e)];
        acc /= z;
        if (L.gate == model::GateMode::kPerHead) acc *= softplus(g[h]);
        if (L.gate == model::GateMode::kPerElement) acc *= softplus(g[h * d + e]);
        out.add(o[static_cast<int64_t>(s) * qw + h * d + e], acc);
      }
    }
  }
  return {};
}

Status recompute_swiglu_input(const QMatrix& gate, const QMatrix& up, const float* x, const float* u,
                              int64_t n, RelErr& out) {
  GRIDQ_ASSIGN_OR_RETURN(auto Wg, widen(gate, "gate_proj"));
  GRIDQ_ASSIGN_OR_RETURN(auto Wu, widen(up, "up_proj"));
  const int64_t I = gate.rows, C = gate.cols;
  // Rows in parallel (each its own products), then the errors added in row order.
  std::vector<double> yg(static_cast<size_t>(n * I)), yu(static_cast<size_t>(n * I));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < n; ++t) {
    const auto xt = to_f64(x + t * C, C);
    matvec(Wg, I, C, xt.data(), yg.data() + t * I);
    matvec(Wu, I, C, xt.data(), yu.data() + t * I);
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const double z = yg[static_cast<size_t>(t * I + i)];
      out.add(u[t * I + i], z / (1.0 + std::exp(-z)) * yu[static_cast<size_t>(t * I + i)]);
    }
  return {};
}

Expected<int64_t> recompute_routing(const model::ModelSpec& spec, const runtime::LayerWeights& lw,
                                    const float* a, int64_t n, const int* idx, const float* weight,
                                    double tie, RelErr& weights) {
  const auto& M = spec.moe;
  const int64_t E = M.n_experts, K = M.top_k, H = spec.hidden_size;
  GRIDQ_ASSIGN_OR_RETURN(auto Wr, widen(lw.router, "router"));
  std::vector<double> z(static_cast<size_t>(E)), s(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
  std::vector<int64_t> order(static_cast<size_t>(E));
  int64_t mismatches = 0;
  for (int64_t t = 0; t < n; ++t) {
    const auto x = to_f64(a + t * H, H);
    matvec(Wr, E, H, x.data(), z.data());
    if (M.score == model::RouterScore::kSigmoid) {
      for (int64_t e = 0; e < E; ++e)
        s[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-z[static_cast<size_t>(e)]));
    } else {
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e)
        sum += (s[static_cast<size_t>(e)] = std::exp(z[static_cast<size_t>(e)] - mx));
      for (auto& v : s) v /= sum;
    }
    for (int64_t e = 0; e < E; ++e)
      biased[static_cast<size_t>(e)] =
          s[static_cast<size_t>(e)] + (lw.router_bias.empty() ? 0.0 : lw.router_bias[static_cast<size_t>(e)]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return biased[static_cast<size_t>(p)] > biased[static_cast<size_t>(q)];
    });
    if (K < E && biased[static_cast<size_t>(order[static_cast<size_t>(K - 1)])] -
                         biased[static_cast<size_t>(order[static_cast<size_t>(K)])] <=
                     tie)
      continue;  // a near-tie: fp32 and float64 may legitimately choose differently
    double denom = 0.0;
    for (int64_t j = 0; j < K; ++j) denom += s[static_cast<size_t>(order[static_cast<size_t>(j)])];
    bool same = true;
    for (int64_t j = 0; j < K && same; ++j) {
      const int64_t e = order[static_cast<size_t>(j)];
      int64_t at = -1;
      for (int64_t i = 0; i < K; ++i)
        if (idx[t * K + i] == e) at = i;
      if (at < 0) {
        same = false;
        break;
      }
      const double ref = M.renormalize ? s[static_cast<size_t>(e)] / denom : s[static_cast<size_t>(e)];
      weights.add(weight[t * K + at], ref);
    }
    if (!same) ++mismatches;
  }
  return mismatches;
}

}  // namespace gridq::quant

// Capture validation (quantizer.md §2 S4): the RMSNorm identity on inputs that come out of a norm, and
// independent scalar float64 recomputations of the inputs that do not (o_proj: softplus-gated attention;
// down_proj: silu(gate·x) ⊙ (up·x)) and of the routing. The references here read the BF16/F32 weights
// themselves and share no code with the CPU backend, so a capture bug cannot hide behind the same bug.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/model_weights.h"

namespace gridq::quant {

// δ = mean_t |r_t − ρ_t| with r_t = mean_{j∈J} (X_tj / w_j)², over the columns J with |w_j| ≥ 1e-3·max|w|.
// With the residual h at hand ρ_t = mean_{j∈J} h_tj² / (m_t + ε), m_t = mean_j h_tj² (the exact value of r_t
// in real arithmetic; it is m_t/(m_t+ε) of quantizer.md when no column is excluded); without it ρ_t = 1.
class RmsIdentity {
 public:
  RmsIdentity(const float* w, int64_t cols, float eps);
  // X [T, cols]; h [T, cols] the rows X normalised (or nullptr).
  void add(const float* X, const float* h, int64_t T);
  // X [n, cols] whose row i normalised h row rows[i] of h [*, cols].
  void add_rows(const float* X, const float* h, std::span<const int64_t> rows);
  double delta() const { return n_ ? sum_ / static_cast<double>(n_) : 0.0; }
  int64_t tokens() const { return n_; }

 private:
  void add_one(const float* x, const float* h);
  std::vector<double> inv_w_;  // [cols] 1/w_j, 0 for excluded columns
  int64_t cols_ = 0, used_ = 0;
  float eps_ = 0.0f;
  double sum_ = 0.0;
  int64_t n_ = 0;
};

// One-shot δ of a tensor (tests, negative controls).
double rmsnorm_identity_delta(const float* X, const float* h, int64_t T, int64_t cols, const float* w,
                              float eps);

// Accumulated relative L2 error ‖got − ref‖ / ‖ref‖.
struct RelErr {
  double err2 = 0.0, ref2 = 0.0;
  void add(double got, double ref) { err2 += (got - ref) * (got - ref), ref2 += ref * ref; }
  double value() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? INFINITY : 0.0); }
};

// o_proj input of the tokens at `positions` of one sequence, recomputed from that sequence's attn_in rows
// a [n_ctx, H] (positions 0 .. n_ctx−1, a fresh context) and compared with the captured rows o [k, n_h*d].
Status recompute_attention(const model::ModelSpec& spec, const runtime::LayerWeights& lw, int l,
                           const float* a, int64_t n_ctx, std::span<const int64_t> positions, const float* o,
                           RelErr& out);

// u = silu(gate·x) ⊙ (up·x) for x [n, C], compared with the captured u [n, I].
Status recompute_swiglu_input(const runtime::QMatrix& gate, const runtime::QMatrix& up, const float* x,
                              const float* u, int64_t n, RelErr& out);

// Routing of rows a [n, H] recomputed (laguna.md §1.4 steps 1–5) and compared with the captured idx/weight
// [n, K] (as a set; weights by expert). Rows whose k-th and (k+1)-th biased scores are within `tie` are
// near-ties and skipped. Returns the number of rows whose chosen set differs; `weights` gets the weights.
Expected<int64_t> recompute_routing(const model::ModelSpec& spec, const runtime::LayerWeights& lw,
                                    const float* a, int64_t n, const int* idx, const float* weight,
                                    double tie, RelErr& weights);

}  // namespace gridq::quant

// The runtime's view of a model's weights: one QMatrix per Linear, fp32 copies of the small vectors
// (norms, router bias). Built from a WeightMap (HF checkpoint, BF16 borrowed from the mmap) or by the
// artifact loader (FP8 / CB matrices); every backend consumes this form.
#pragma once

#include <functional>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "model/weight_map.h"
#include "runtime/qmatrix.h"

namespace gridq::runtime {

struct LayerWeights {
  std::vector<float> input_norm;  // [H]
  std::vector<float> post_norm;   // [H]
  std::vector<float> q_norm;      // [d] (empty without qk_norm)
  std::vector<float> k_norm;      // [d]
  QMatrix q;                      // [n_h*d, H]
  QMatrix k;                      // [n_kv*d, H]
  QMatrix v;                      // [n_kv*d, H]
  QMatrix o;                      // [H, n_h*d]
  QMatrix g;                      // [n_h, H] or [n_h*d, H]; rows == 0 when the layer has no gate
  // Dense MLP.
  QMatrix mlp_gate;  // [D, H]
  QMatrix mlp_up;    // [D, H]
  QMatrix mlp_down;  // [H, D]
  // MoE.
  QMatrix router;                    // [E, H], BF16/F32 only (never quantized)
  std::vector<float> router_bias;    // [E] or empty
  std::vector<QMatrix> expert_gate;  // E x [I, H]
  std::vector<QMatrix> expert_up;    // E x [I, H]
  std::vector<QMatrix> expert_down;  // E x [H, I]
  QMatrix shared_gate;               // [I_s, H]; rows == 0 without a shared expert
  QMatrix shared_up;                 // [I_s, H]
  QMatrix shared_down;               // [H, I_s]
};

struct ModelWeights {
  QMatrix embed;                  // [vocab, H]
  QMatrix lm_head;                // [vocab, H]
  std::vector<float> final_norm;  // [H]
  std::vector<LayerWeights> layers;
};

// f(m) for every Linear of `w` (ModelWeights, const or not): embed, each layer's matrices (q, k, v, o, g, the
// dense MLP, router, shared expert, then the routed experts' gate, up and down stacks), lm_head. Absent
// optional matrices (rows == 0) are visited too.
template <typename W, typename F>
void for_each_matrix(W& w, F&& f) {
  f(w.embed);
  for (auto& l : w.layers) {
    for (auto* m : {&l.q, &l.k, &l.v, &l.o, &l.g, &l.mlp_gate, &l.mlp_up, &l.mlp_down, &l.router,
                    &l.shared_gate, &l.shared_up, &l.shared_down})
      f(*m);
    for (auto* stack : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (auto& m : *stack) f(m);
  }
  f(w.lm_head);
}

// Turns one weight role into a QMatrix (artifact loaders resolve FP8 / CB modules this way).
using MatrixResolver = std::function<Expected<QMatrix>(const model::WeightRef&)>;

// Builds every role the spec needs; a missing role is an error naming it. Matrices come from `resolve`
// when given, else from the BF16/F32 tensors themselves (qmatrix_from_ref). Vectors are always read as
// BF16/F32 tensors.
Expected<ModelWeights> build_model_weights(const model::ModelSpec& spec, const model::WeightMap& w,
                                           const MatrixResolver& resolve = {});

}  // namespace gridq::runtime

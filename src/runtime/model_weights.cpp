#include "runtime/model_weights.h"

namespace gridq::runtime {

namespace {

using model::roles::layer;

thread_local const MatrixResolver* g_resolve = nullptr;  // set for the duration of one build

Expected<QMatrix> mat(const model::WeightMap& w, const std::string& role) {
  const model::WeightRef* r = w.find(role);
  if (!r) return err("weights: role '{}' is missing", role);
  if (g_resolve && *g_resolve) return (*g_resolve)(*r);
  return qmatrix_from_ref(*r);
}

Expected<std::vector<float>> vec(const model::WeightMap& w, const std::string& role) {
  const model::WeightRef* r = w.find(role);
  if (!r) return err("weights: role '{}' is missing", role);
  return vector_from_ref(*r);
}

}  // namespace

Expected<ModelWeights> build_model_weights(const model::ModelSpec& spec, const model::WeightMap& w,
                                           const MatrixResolver& resolve) {
  namespace R = model::roles;
  g_resolve = &resolve;
  struct Reset {
    ~Reset() { g_resolve = nullptr; }
  } reset;
  ModelWeights mw;
  GRIDQ_ASSIGN_OR_RETURN(mw.embed, mat(w, std::string(R::kEmbed)));
  GRIDQ_ASSIGN_OR_RETURN(mw.lm_head, mat(w, std::string(R::kLmHead)));
  GRIDQ_ASSIGN_OR_RETURN(mw.final_norm, vec(w, std::string(R::kFinalNorm)));
  for (int l = 0; l < spec.n_layers; ++l) {
    const model::LayerSpec& L = spec.layers[static_cast<size_t>(l)];
    LayerWeights lw;
    GRIDQ_ASSIGN_OR_RETURN(lw.input_norm, vec(w, layer(l, R::kInputNorm)));
    GRIDQ_ASSIGN_OR_RETURN(lw.post_norm, vec(w, layer(l, R::kPostNorm)));
    if (L.qk_norm) {
      GRIDQ_ASSIGN_OR_RETURN(lw.q_norm, vec(w, layer(l, R::kQNorm)));
      GRIDQ_ASSIGN_OR_RETURN(lw.k_norm, vec(w, layer(l, R::kKNorm)));
    }
    GRIDQ_ASSIGN_OR_RETURN(lw.q, mat(w, layer(l, R::kQ)));
    GRIDQ_ASSIGN_OR_RETURN(lw.k, mat(w, layer(l, R::kK)));
    GRIDQ_ASSIGN_OR_RETURN(lw.v, mat(w, layer(l, R::kV)));
    GRIDQ_ASSIGN_OR_RETURN(lw.o, mat(w, layer(l, R::kO)));
    if (L.gate != model::GateMode::kNone) {
      GRIDQ_ASSIGN_OR_RETURN(lw.g, mat(w, layer(l, R::kG)));
    }
    if (L.mlp == model::MlpKind::kDense) {
      GRIDQ_ASSIGN_OR_RETURN(lw.mlp_gate, mat(w, layer(l, R::kMlpGate)));
      GRIDQ_ASSIGN_OR_RETURN(lw.mlp_up, mat(w, layer(l, R::kMlpUp)));
      GRIDQ_ASSIGN_OR_RETURN(lw.mlp_down, mat(w, layer(l, R::kMlpDown)));
    } else {
      GRIDQ_ASSIGN_OR_RETURN(lw.router, mat(w, layer(l, R::kRouter)));
      if (spec.moe.has_bias) {
        GRIDQ_ASSIGN_OR_RETURN(lw.router_bias, vec(w, layer(l, R::kRouterBias)));
      }
      for (int e = 0; e < spec.moe.n_experts; ++e) {
        GRIDQ_ASSIGN_OR_RETURN(QMatrix g, mat(w, R::expert(l, e, "gate")));
        GRIDQ_ASSIGN_OR_RETURN(QMatrix u, mat(w, R::expert(l, e, "up")));
        GRIDQ_ASSIGN_OR_RETURN(QMatrix d, mat(w, R::expert(l, e, "down")));
        lw.expert_gate.push_back(g);
        lw.expert_up.push_back(u);
        lw.expert_down.push_back(d);
      }
      if (spec.moe.shared_intermediate > 0) {
        GRIDQ_ASSIGN_OR_RETURN(lw.shared_gate, mat(w, layer(l, R::kSharedGate)));
        GRIDQ_ASSIGN_OR_RETURN(lw.shared_up, mat(w, layer(l, R::kSharedUp)));
        GRIDQ_ASSIGN_OR_RETURN(lw.shared_down, mat(w, layer(l, R::kSharedDown)));
      }
    }
    mw.layers.push_back(std::move(lw));
  }
  return mw;
}

}  // namespace gridq::runtime

// Qwen3MoeForCausalLM: softmax router over all experts, top-k, optional renormalisation (norm_topk_prob),
// q/k RMSNorm, no output gate, no shared expert.
#include <algorithm>
#include <fmt/format.h>

#include "model/dense_common.h"

namespace gridq::model {

using namespace detail;

Expected<Adapted> adapt_qwen3_moe(const nlohmann::json& c, const TensorTable& tensors) {
  Adapted a;
  ModelSpec& s = a.spec;
  s.architecture = "Qwen3MoeForCausalLM";
  int head_dim = 0, n_heads = 0, n_kv = 0;
  GRIDQ_RETURN_IF_ERROR(read_llama_globals(c, s, head_dim, n_heads, n_kv));
  GRIDQ_ASSIGN_OR_RETURN(RopeParams rope, llama_rope(c, head_dim, s.max_position_embeddings));
  MoeSpec& m = s.moe;
  // transformers v5 writes num_local_experts; older configs num_experts.
  m.n_experts = cfg_int_or(c, "num_experts", cfg_int_or(c, "num_local_experts", 0));
  if (m.n_experts <= 0) return err("config.json: num_experts / num_local_experts missing or not positive");
  GRIDQ_ASSIGN_OR_RETURN(m.top_k, cfg_int(c, "num_experts_per_tok"));
  GRIDQ_ASSIGN_OR_RETURN(m.expert_intermediate, cfg_int(c, "moe_intermediate_size"));
  m.score = RouterScore::kSoftmax;
  m.renormalize = cfg_bool_or(c, "norm_topk_prob", false);
  m.routed_scaling = 1.0f;
  m.shared_intermediate = 0;
  if (m.top_k <= 0 || m.top_k > m.n_experts) return err("config.json: num_experts_per_tok {} out of range", m.top_k);
  const int dense_inter = cfg_int_or(c, "intermediate_size", 0);
  const int sparse_step = cfg_int_or(c, "decoder_sparse_step", 1);
  std::vector<int> mlp_only = cfg_int_list(c, "mlp_only_layers");
  TensorClaimer cl(tensors);
  for (const auto& [name, info] : tensors)
    if (name.ends_with("rotary_emb.inv_freq")) cl.ignore(name);
  WeightMap& w = a.weights;
  for (int l = 0; l < s.n_layers; ++l) {
    LayerSpec L;
    L.attn = AttnKind::kFull;
    L.n_heads = n_heads;
    L.n_kv_heads = n_kv;
    L.head_dim = head_dim;
    L.rope = rope;
    L.qk_norm = true;
    const bool moe = std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && m.n_experts > 0 &&
                     sparse_step > 0 && (l + 1) % sparse_step == 0;
    L.mlp = moe ? MlpKind::kMoe : MlpKind::kDense;
    L.dense_intermediate = moe ? 0 : dense_inter;
    GRIDQ_RETURN_IF_ERROR(claim_llama_attention(cl, w, l, L, s.hidden_size));
    const std::string p = fmt::format("model.layers.{}.mlp", l);
    if (moe) {
      GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kRouter), p + ".gate.weight", m.n_experts,
                                      s.hidden_size));
      GRIDQ_RETURN_IF_ERROR(claim_experts(cl, w, p + ".experts", l, m.n_experts, m.expert_intermediate,
                                          s.hidden_size));
    } else {
      if (dense_inter <= 0) return err("config.json: layer {} is dense but intermediate_size is missing", l);
      GRIDQ_RETURN_IF_ERROR(claim_swiglu(cl, w, p, roles::layer(l, roles::kMlpGate), roles::layer(l, roles::kMlpUp),
                                         roles::layer(l, roles::kMlpDown), dense_inter, s.hidden_size));
    }
    s.layers.push_back(std::move(L));
  }
  GRIDQ_RETURN_IF_ERROR(claim_llama_ends(cl, w, s));
  GRIDQ_RETURN_IF_ERROR(cl.finish("Qwen3MoeForCausalLM"));
  return a;
}

}  // namespace gridq::model

// LlamaForCausalLM and Qwen3ForCausalLM (dense). Qwen3 adds per-head q/k RMSNorm before RoPE.
#include <fmt/format.h>

#include "model/dense_common.h"

namespace gridq::model {

using namespace detail;

Expected<Adapted> adapt_llama(const nlohmann::json& c, const TensorTable& tensors) {
  const std::string arch = c["architectures"][0].get<std::string>();
  const bool qwen3 = arch == "Qwen3ForCausalLM";
  Adapted a;
  ModelSpec& s = a.spec;
  s.architecture = arch;
  int head_dim = 0, n_heads = 0, n_kv = 0;
  GRIDQ_RETURN_IF_ERROR(read_llama_globals(c, s, head_dim, n_heads, n_kv));
  GRIDQ_ASSIGN_OR_RETURN(int inter, cfg_int(c, "intermediate_size"));
  GRIDQ_ASSIGN_OR_RETURN(RopeParams rope, llama_rope(c, head_dim, s.max_position_embeddings));
  TensorClaimer cl(tensors);
  for (const auto& [name, info] : tensors)
    if (name.size() > 19 && name.ends_with("rotary_emb.inv_freq")) cl.ignore(name);
  WeightMap& w = a.weights;
  for (int l = 0; l < s.n_layers; ++l) {
    LayerSpec L;
    L.attn = AttnKind::kFull;
    L.n_heads = n_heads;
    L.n_kv_heads = n_kv;
    L.head_dim = head_dim;
    L.rope = rope;
    L.qk_norm = qwen3;
    L.mlp = MlpKind::kDense;
    L.dense_intermediate = inter;
    GRIDQ_RETURN_IF_ERROR(claim_llama_attention(cl, w, l, L, s.hidden_size));
    GRIDQ_RETURN_IF_ERROR(claim_swiglu(cl, w, fmt::format("model.layers.{}.mlp", l), roles::layer(l, roles::kMlpGate),
                                       roles::layer(l, roles::kMlpUp), roles::layer(l, roles::kMlpDown), inter,
                                       s.hidden_size));
    s.layers.push_back(std::move(L));
  }
  GRIDQ_RETURN_IF_ERROR(claim_llama_ends(cl, w, s));
  GRIDQ_RETURN_IF_ERROR(cl.finish(arch));
  return a;
}

}  // namespace gridq::model

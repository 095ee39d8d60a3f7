// LagunaForCausalLM adapter (laguna.md §1-§4). Config values that change the math and are not what the
// released models use (attention sinks, router softcapping, non-sigmoid scores, router weight on input)
// are refused rather than approximated.
#include <fmt/format.h>

#include "model/adapter_util.h"

namespace gridq::model {

using namespace detail;

namespace {

bool ignorable(const std::string& name) {
  auto ends = [&](std::string_view s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  return ends("rotary_emb.inv_freq") || ends(".k_scale") || ends(".v_scale");
}

Status check_laguna_config(const nlohmann::json& c) {
  if (cfg_bool_or(c, "swa_attention_sink_enabled", false))
    return err("config.json: swa_attention_sink_enabled=true is not supported (no released Laguna uses sinks)");
  if (cfg_num_or(c, "moe_router_logit_softcapping", 0.0) != 0.0)
    return err("config.json: moe_router_logit_softcapping={} is not supported (must be 0)",
               cfg_num_or(c, "moe_router_logit_softcapping", 0.0));
  if (c.contains("moe_router_score_func") && c["moe_router_score_func"] != "sigmoid")
    return err("config.json: moe_router_score_func={} is not supported (must be \"sigmoid\")",
               c["moe_router_score_func"].dump());
  if (cfg_bool_or(c, "moe_apply_router_weight_on_input", false))
    return err("config.json: moe_apply_router_weight_on_input=true is not supported");
  if (cfg_bool_or(c, "attention_bias", false)) return err("config.json: attention_bias=true is not supported");
  if (c.value("hidden_act", std::string("silu")) != "silu")
    return err("config.json: hidden_act '{}' is not supported (must be silu)", c.value("hidden_act", std::string()));
  if (cfg_bool_or(c, "tie_word_embeddings", false))
    return err("config.json: tie_word_embeddings=true is not supported for Laguna (lm_head is separate)");
  if (c.contains("n_group") && cfg_int_or(c, "n_group", 1) > 1)
    return err("config.json: expert groups (n_group={}) are not supported", cfg_int_or(c, "n_group", 1));
  return {};
}

}  // namespace

Expected<Adapted> adapt_laguna(const nlohmann::json& c, const TensorTable& tensors) {
  GRIDQ_RETURN_IF_ERROR(check_laguna_config(c));
  Adapted a;
  ModelSpec& s = a.spec;
  s.architecture = "LagunaForCausalLM";
  GRIDQ_ASSIGN_OR_RETURN(s.vocab_size, cfg_int(c, "vocab_size"));
  GRIDQ_ASSIGN_OR_RETURN(s.hidden_size, cfg_int(c, "hidden_size"));
  GRIDQ_ASSIGN_OR_RETURN(s.n_layers, cfg_int(c, "num_hidden_layers"));
  s.norm_eps = static_cast<float>(cfg_num_or(c, "rms_norm_eps", 1e-6));
  s.max_position_embeddings = cfg_int_or(c, "max_position_embeddings", 0);
  s.bos_token_id = cfg_int_or(c, "bos_token_id", -1);
  s.eos_token_ids = cfg_int_list(c, "eos_token_id");
  s.pad_token_id = cfg_int_or(c, "pad_token_id", -1);
  const int H = s.hidden_size;
  GRIDQ_ASSIGN_OR_RETURN(int n_kv, cfg_int(c, "num_key_value_heads"));
  const int head_dim = cfg_int_or(c, "head_dim", 128);
  GRIDQ_ASSIGN_OR_RETURN(int n_heads_top, cfg_int(c, "num_attention_heads"));
  const int window = cfg_int_or(c, "sliding_window", 0);

  // MoE parameters.
  MoeSpec& m = s.moe;
  m.n_experts = cfg_int_or(c, "num_experts", 0);
  m.top_k = cfg_int_or(c, "num_experts_per_tok", 0);
  m.expert_intermediate = cfg_int_or(c, "moe_intermediate_size", 0);
  m.shared_intermediate = cfg_int_or(c, "shared_expert_intermediate_size", 0);
  m.routed_scaling = static_cast<float>(cfg_num_or(c, "moe_routed_scaling_factor", 1.0));
  m.score = RouterScore::kSigmoid;
  m.renormalize = true;  // Laguna always renormalises (norm_topk_prob absent on the tiny model)
  if (c.contains("norm_topk_prob") && !cfg_bool_or(c, "norm_topk_prob", true))
    return err("config.json: norm_topk_prob=false is not supported for Laguna");
  const int dense_inter = cfg_int_or(c, "intermediate_size", 0);

  auto lt = c.find("layer_types");
  auto mlt = c.find("mlp_layer_types");
  auto heads = c.find("num_attention_heads_per_layer");
  const nlohmann::json& rp = c.contains("rope_parameters") ? c["rope_parameters"] : c;

  detail::TensorClaimer cl(tensors);
  WeightMap& w = a.weights;
  for (const auto& [name, info] : tensors)
    if (ignorable(name)) cl.ignore(name);

  for (int l = 0; l < s.n_layers; ++l) {
    LayerSpec L;
    std::string type = "full_attention";
    if (lt != c.end()) {
      if (!lt->is_array() || static_cast<int>(lt->size()) != s.n_layers)
        return err("config.json: layer_types must list {} entries", s.n_layers);
      type = (*lt)[static_cast<size_t>(l)].get<std::string>();
    }
    if (type == "full_attention") {
      L.attn = AttnKind::kFull;
    } else if (type == "sliding_attention") {
      L.attn = AttnKind::kSliding;
      if (window <= 0) return err("config.json: layer {} is sliding_attention but sliding_window is {}", l, window);
      L.window = window;
    } else {
      return err("config.json: layer_types[{}] = '{}' is not supported", l, type);
    }
    L.n_heads = n_heads_top;
    if (heads != c.end()) {
      if (!heads->is_array() || static_cast<int>(heads->size()) != s.n_layers)
        return err("config.json: num_attention_heads_per_layer must list {} entries", s.n_layers);
      L.n_heads = (*heads)[static_cast<size_t>(l)].get<int>();
    }
    L.n_kv_heads = n_kv;
    L.head_dim = head_dim;
    if (L.n_heads % n_kv != 0)
      return err("config.json: layer {} has {} heads, not a multiple of {} KV heads", l, L.n_heads, n_kv);
    L.qk_norm = true;
    const nlohmann::json* rope_set = &rp;
    if (rp.contains(type)) rope_set = &rp[type];
    GRIDQ_ASSIGN_OR_RETURN(L.rope, rope_from_json(*rope_set, head_dim, s.max_position_embeddings,
                                                   fmt::format("config.json rope_parameters[{}]", type)));
    const std::string p = fmt::format("model.layers.{}.", l);
    // Gate mode from g_proj's shape, not from `gating` (laguna.md §1.3 step 6).
    const io::TensorInfo* g = cl.peek(p + "self_attn.g_proj.weight");
    if (!g) {
      L.gate = GateMode::kNone;
    } else if (g->shape.size() == 2 && g->shape[0] == L.n_heads) {
      L.gate = GateMode::kPerHead;
    } else if (g->shape.size() == 2 && g->shape[0] == static_cast<int64_t>(L.n_heads) * head_dim) {
      L.gate = GateMode::kPerElement;
    } else {
      return err("checkpoint: '{}self_attn.g_proj.weight' rows match neither per-head ({}) nor per-element ({})", p,
                 L.n_heads, L.n_heads * head_dim);
    }
    // MLP kind: mlp_layer_types when present, else presence of the router.
    bool moe = cl.has(p + "mlp.gate.weight");
    if (mlt != c.end()) {
      if (!mlt->is_array() || static_cast<int>(mlt->size()) != s.n_layers)
        return err("config.json: mlp_layer_types must list {} entries", s.n_layers);
      const std::string k = (*mlt)[static_cast<size_t>(l)].get<std::string>();
      if (k != "dense" && k != "sparse") return err("config.json: mlp_layer_types[{}] = '{}' is not supported", l, k);
      moe = (k == "sparse");
    }
    L.mlp = moe ? MlpKind::kMoe : MlpKind::kDense;
    L.dense_intermediate = moe ? 0 : dense_inter;

    const int qw = L.n_heads * head_dim, kvw = n_kv * head_dim;
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kInputNorm), p + "input_layernorm.weight", H));
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kPostNorm), p + "post_attention_layernorm.weight", H));
    GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kQ), p + "self_attn.q_proj.weight", qw, H));
    GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kK), p + "self_attn.k_proj.weight", kvw, H));
    GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kV), p + "self_attn.v_proj.weight", kvw, H));
    GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kO), p + "self_attn.o_proj.weight", H, qw));
    if (L.gate != GateMode::kNone)
      GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kG), p + "self_attn.g_proj.weight",
                                      L.gate == GateMode::kPerHead ? L.n_heads : qw, H));
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kQNorm), p + "self_attn.q_norm.weight", head_dim));
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kKNorm), p + "self_attn.k_norm.weight", head_dim));

    if (!moe) {
      if (dense_inter <= 0) return err("config.json: layer {} is dense but intermediate_size is missing", l);
      GRIDQ_RETURN_IF_ERROR(claim_swiglu(cl, w, p + "mlp", roles::layer(l, roles::kMlpGate),
                                         roles::layer(l, roles::kMlpUp), roles::layer(l, roles::kMlpDown),
                                         dense_inter, H));
    } else {
      if (m.n_experts <= 0 || m.top_k <= 0 || m.top_k > m.n_experts || m.expert_intermediate <= 0)
        return err("config.json: layer {} is sparse but num_experts/num_experts_per_tok/moe_intermediate_size are "
                   "missing or inconsistent", l);
      GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kRouter), p + "mlp.gate.weight", m.n_experts, H));
      const std::string b1 = p + "mlp.experts.e_score_correction_bias", b2 = p + "mlp.gate.e_score_correction_bias";
      if (cl.has(b1) && cl.has(b2)) return err("checkpoint: both '{}' and '{}' present", b1, b2);
      if (cl.has(b1) || cl.has(b2)) {
        GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kRouterBias), cl.has(b1) ? b1 : b2, m.n_experts));
        m.has_bias = true;
      } else if (m.has_bias) {
        return err("checkpoint: layer {} lacks e_score_correction_bias that other layers have", l);
      }
      GRIDQ_RETURN_IF_ERROR(claim_experts(cl, w, p + "mlp.experts", l, m.n_experts, m.expert_intermediate, H));
      const std::string se1 = p + "mlp.shared_expert", se2 = p + "mlp.shared_experts";
      const bool has1 = cl.has(se1 + ".gate_proj.weight"), has2 = cl.has(se2 + ".gate_proj.weight");
      if (has1 && has2) return err("checkpoint: layer {} has both shared_expert and shared_experts", l);
      if (m.shared_intermediate > 0) {
        GRIDQ_RETURN_IF_ERROR(claim_swiglu(cl, w, has2 ? se2 : se1, roles::layer(l, roles::kSharedGate),
                                           roles::layer(l, roles::kSharedUp), roles::layer(l, roles::kSharedDown),
                                           m.shared_intermediate, H));
      }
    }
    s.layers.push_back(std::move(L));
  }
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, std::string(roles::kEmbed), "model.embed_tokens.weight", s.vocab_size, H));
  GRIDQ_RETURN_IF_ERROR(cl.vector(w, std::string(roles::kFinalNorm), "model.norm.weight", H));
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, std::string(roles::kLmHead), "lm_head.weight", s.vocab_size, H));
  GRIDQ_RETURN_IF_ERROR(cl.finish("LagunaForCausalLM"));
  return a;
}

}  // namespace gridq::model

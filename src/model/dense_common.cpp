#include "model/dense_common.h"

#include <fmt/format.h>

namespace gridq::model::detail {

Status read_llama_globals(const nlohmann::json& c, ModelSpec& s, int& head_dim, int& n_heads, int& n_kv) {
  GRIDQ_ASSIGN_OR_RETURN(s.vocab_size, cfg_int(c, "vocab_size"));
  GRIDQ_ASSIGN_OR_RETURN(s.hidden_size, cfg_int(c, "hidden_size"));
  GRIDQ_ASSIGN_OR_RETURN(s.n_layers, cfg_int(c, "num_hidden_layers"));
  GRIDQ_ASSIGN_OR_RETURN(n_heads, cfg_int(c, "num_attention_heads"));
  n_kv = cfg_int_or(c, "num_key_value_heads", n_heads);
  head_dim = cfg_int_or(c, "head_dim", 0);
  if (head_dim <= 0) head_dim = s.hidden_size / n_heads;
  if (n_heads % n_kv != 0) return err("config.json: {} heads is not a multiple of {} KV heads", n_heads, n_kv);
  s.norm_eps = static_cast<float>(cfg_num_or(c, "rms_norm_eps", 1e-6));
  s.max_position_embeddings = cfg_int_or(c, "max_position_embeddings", 0);
  s.tie_word_embeddings = cfg_bool_or(c, "tie_word_embeddings", false);
  s.bos_token_id = cfg_int_or(c, "bos_token_id", -1);
  s.eos_token_ids = cfg_int_list(c, "eos_token_id");
  s.pad_token_id = cfg_int_or(c, "pad_token_id", -1);
  if (cfg_bool_or(c, "attention_bias", false)) return err("config.json: attention_bias=true is not supported");
  if (cfg_bool_or(c, "mlp_bias", false)) return err("config.json: mlp_bias=true is not supported");
  if (cfg_bool_or(c, "use_sliding_window", false))
    return err("config.json: use_sliding_window=true is not supported for this architecture");
  if (c.value("hidden_act", std::string("silu")) != "silu")
    return err("config.json: hidden_act '{}' is not supported (must be silu)", c.value("hidden_act", std::string()));
  if (cfg_int_or(c, "pretraining_tp", 1) != 1) return err("config.json: pretraining_tp != 1 is not supported");
  return {};
}

Expected<RopeParams> llama_rope(const nlohmann::json& c, int head_dim, int max_pos) {
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object()) {
    nlohmann::json p = c["rope_parameters"];
    if (!p.contains("partial_rotary_factor") && c.contains("partial_rotary_factor"))
      p["partial_rotary_factor"] = c["partial_rotary_factor"];
    return rope_from_json(p, head_dim, max_pos, "config.json rope_parameters");
  }
  nlohmann::json p = nlohmann::json::object();
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) p = c["rope_scaling"];
  p["rope_theta"] = cfg_num_or(c, "rope_theta", 10000.0);
  if (c.contains("partial_rotary_factor")) p["partial_rotary_factor"] = c["partial_rotary_factor"];
  return rope_from_json(p, head_dim, max_pos, "config.json rope_scaling");
}

Status claim_llama_attention(TensorClaimer& cl, WeightMap& w, int l, const LayerSpec& L, int H) {
  const std::string p = fmt::format("model.layers.{}.", l);
  const int qw = L.n_heads * L.head_dim, kvw = L.n_kv_heads * L.head_dim;
  GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kInputNorm), p + "input_layernorm.weight", H));
  GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kPostNorm), p + "post_attention_layernorm.weight", H));
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kQ), p + "self_attn.q_proj.weight", qw, H));
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kK), p + "self_attn.k_proj.weight", kvw, H));
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kV), p + "self_attn.v_proj.weight", kvw, H));
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, roles::layer(l, roles::kO), p + "self_attn.o_proj.weight", H, qw));
  if (L.qk_norm) {
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kQNorm), p + "self_attn.q_norm.weight", L.head_dim));
    GRIDQ_RETURN_IF_ERROR(cl.vector(w, roles::layer(l, roles::kKNorm), p + "self_attn.k_norm.weight", L.head_dim));
  }
  return {};
}

Status claim_llama_ends(TensorClaimer& cl, WeightMap& w, const ModelSpec& s) {
  const int H = s.hidden_size;
  GRIDQ_RETURN_IF_ERROR(cl.matrix(w, std::string(roles::kEmbed), "model.embed_tokens.weight", s.vocab_size, H));
  GRIDQ_RETURN_IF_ERROR(cl.vector(w, std::string(roles::kFinalNorm), "model.norm.weight", H));
  if (cl.has("lm_head.weight")) {
    GRIDQ_RETURN_IF_ERROR(cl.matrix(w, std::string(roles::kLmHead), "lm_head.weight", s.vocab_size, H));
  } else if (s.tie_word_embeddings) {
    w.set(std::string(roles::kLmHead), *w.find(roles::kEmbed));
  } else {
    return err("checkpoint: required tensor 'lm_head.weight' is missing (tie_word_embeddings is false)");
  }
  return {};
}

}  // namespace gridq::model::detail

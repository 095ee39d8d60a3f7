#include "gridbook/model_layout.h"

#include "gridbook/matching.h"

namespace gridq::gridbook {

namespace {

using nlohmann::json;

Expected<int64_t> get_int(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return err("config.json: missing '{}'", key);
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    return err("config.json: '{}' must be a positive integer", key);
  return it->get<int64_t>();
}

bool replace_once(std::string& s, std::string_view from, std::string_view to) {
  const size_t pos = s.find(from);
  if (pos == std::string::npos) return false;
  s.replace(pos, from.size(), to);
  return true;
}

}  // namespace

std::string spelling_alias(std::string_view module_name) {
  std::string s = canonical_module_name(module_name);
  if (!replace_once(s, ".mlp.shared_experts.", ".mlp.shared_expert.")) {
    replace_once(s, ".mlp.gate.e_score_correction_bias", ".mlp.experts.e_score_correction_bias");
  }
  return s;
}

Expected<std::vector<ModuleSpec>> laguna_module_specs(const json& cfg,
                                                      const std::function<ExpertLayout(int layer)>& layout) {
  const std::string model_type = cfg.value("model_type", std::string());
  if (model_type != "laguna") {
    return err("config.json: model_type '{}' is not supported (gridq knows: laguna)", model_type);
  }
  GRIDQ_ASSIGN_OR_RETURN(const int64_t hidden, get_int(cfg, "hidden_size"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t vocab, get_int(cfg, "vocab_size"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t layers, get_int(cfg, "num_hidden_layers"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t n_kv, get_int(cfg, "num_key_value_heads"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t experts, get_int(cfg, "num_experts"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t dense_inter, get_int(cfg, "intermediate_size"));
  GRIDQ_ASSIGN_OR_RETURN(const int64_t moe_inter, get_int(cfg, "moe_intermediate_size"));
  const int64_t head_dim = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>() : 128;
  const int64_t shared_inter = cfg.value("shared_expert_intermediate_size", int64_t{0});

  std::vector<int64_t> heads(static_cast<size_t>(layers));
  if (auto it = cfg.find("num_attention_heads_per_layer"); it != cfg.end()) {
    if (!it->is_array() || it->size() != static_cast<size_t>(layers)) {
      return err("config.json: num_attention_heads_per_layer must list {} layers", layers);
    }
    for (int64_t l = 0; l < layers; ++l) heads[l] = (*it)[l].get<int64_t>();
  } else {
    GRIDQ_ASSIGN_OR_RETURN(const int64_t n, get_int(cfg, "num_attention_heads"));
    for (auto& h : heads) h = n;
  }
  std::vector<bool> dense(static_cast<size_t>(layers), false);
  if (auto it = cfg.find("mlp_layer_types"); it != cfg.end()) {
    if (!it->is_array() || it->size() != static_cast<size_t>(layers)) {
      return err("config.json: mlp_layer_types must list {} layers", layers);
    }
    for (int64_t l = 0; l < layers; ++l) {
      const std::string t = (*it)[l].get<std::string>();
      if (t != "dense" && t != "sparse") return err("config.json: mlp_layer_types[{}] '{}' unknown", l, t);
      dense[l] = t == "dense";
    }
  } else if (auto jt = cfg.find("mlp_only_layers"); jt != cfg.end()) {
    for (const auto& l : *jt) {
      const int64_t i = l.get<int64_t>();
      if (i < 0 || i >= layers) return err("config.json: mlp_only_layers entry {} out of range", i);
      dense[i] = true;
    }
  }

  std::vector<ModuleSpec> out;
  auto linear = [&](std::string name, Component c, std::vector<int64_t> shape,
                    std::vector<int64_t> alt = {}) {
    out.push_back(ModuleSpec{std::move(name), c, true, false, std::move(shape), std::move(alt)});
  };
  auto param = [&](std::string name, Component c, std::vector<int64_t> shape, bool bare = false) {
    out.push_back(ModuleSpec{std::move(name), c, false, bare, std::move(shape), {}});
  };
  param("model.embed_tokens", Component::kEmbed, {vocab, hidden});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const int64_t q_width = heads[l] * head_dim;
    const int64_t kv_width = n_kv * head_dim;
    param(p + "input_layernorm", Component::kNorms, {hidden});
    param(p + "post_attention_layernorm", Component::kNorms, {hidden});
    param(p + "self_attn.q_norm", Component::kNorms, {head_dim});
    param(p + "self_attn.k_norm", Component::kNorms, {head_dim});
    linear(p + "self_attn.q_proj", Component::kAttention, {q_width, hidden});
    linear(p + "self_attn.k_proj", Component::kAttention, {kv_width, hidden});
    linear(p + "self_attn.v_proj", Component::kAttention, {kv_width, hidden});
    linear(p + "self_attn.o_proj", Component::kAttention, {hidden, q_width});
    // Per-head gating [n_h, H], per-element [n_h·128, H]; the shape decides (laguna.md §1.3 step 6).
    linear(p + "self_attn.g_proj", Component::kGProj, {heads[l], hidden}, {q_width, hidden});
    if (dense[l]) {
      linear(p + "mlp.gate_proj", Component::kDenseMlp, {dense_inter, hidden});
      linear(p + "mlp.up_proj", Component::kDenseMlp, {dense_inter, hidden});
      linear(p + "mlp.down_proj", Component::kDenseMlp, {hidden, dense_inter});
      continue;
    }
    linear(p + "mlp.gate", Component::kRouters, {experts, hidden});
    param(p + "mlp.experts.e_score_correction_bias", Component::kRouters, {experts}, /*bare=*/true);
    if (layout(static_cast<int>(l)) == ExpertLayout::kStacked) {
      linear(p + "mlp.experts.gate_up_proj", Component::kRoutedExperts, {experts, 2 * moe_inter, hidden});
      linear(p + "mlp.experts.down_proj", Component::kRoutedExperts, {experts, hidden, moe_inter});
      out[out.size() - 1].bare = out[out.size() - 2].bare = true;
    } else {
      for (int64_t e = 0; e < experts; ++e) {
        const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
        linear(q + "gate_proj", Component::kRoutedExperts, {moe_inter, hidden});
        linear(q + "up_proj", Component::kRoutedExperts, {moe_inter, hidden});
        linear(q + "down_proj", Component::kRoutedExperts, {hidden, moe_inter});
      }
    }
    if (shared_inter > 0) {
      linear(p + "mlp.shared_expert.gate_proj", Component::kSharedExperts, {shared_inter, hidden});
      linear(p + "mlp.shared_expert.up_proj", Component::kSharedExperts, {shared_inter, hidden});
      linear(p + "mlp.shared_expert.down_proj", Component::kSharedExperts, {hidden, shared_inter});
    }
  }
  param("model.norm", Component::kNorms, {hidden});
  linear("lm_head", Component::kLmHead, {vocab, hidden});
  return out;
}

}  // namespace gridq::gridbook

#include "model/config_check.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace gridq::model {

namespace {

using nlohmann::json;

// Bounds are generous multiples of the largest released models, well inside int32 (the spec's type) so that
// products such as heads x head_dim cannot overflow either.
constexpr int64_t kMaxDim = int64_t{1} << 20;  // hidden, intermediate sizes
constexpr int64_t kMaxCount = 4096;            // layers, heads
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPositions = int64_t{1} << 26;  // 64 Mi tokens
constexpr int64_t kInt32Max = INT32_MAX;

struct IntRule {
  const char* key;
  int64_t lo, hi;
};

// Integer fields the adapters read (absent or null: the adapter's default applies).
constexpr IntRule kIntRules[] = {
    {"vocab_size", 1, kMaxVocab},
    {"hidden_size", 1, kMaxDim},
    {"num_hidden_layers", 1, kMaxCount},
    {"num_attention_heads", 1, kMaxCount},
    {"num_key_value_heads", 1, kMaxCount},
    {"head_dim", 1, kMaxDim},
    {"intermediate_size", 0, kMaxDim},
    {"moe_intermediate_size", 0, kMaxDim},
    {"shared_expert_intermediate_size", 0, kMaxDim},
    {"num_experts", 0, 1 << 16},
    {"num_local_experts", 0, 1 << 16},
    {"num_experts_per_tok", 0, 1 << 16},
    {"n_group", 0, 1 << 16},
    {"decoder_sparse_step", 0, kMaxCount},
    {"pretraining_tp", -kInt32Max, kInt32Max},
    {"sliding_window", 0, kMaxPositions},
    {"max_position_embeddings", 1, kMaxPositions},
    {"bos_token_id", -1, kMaxVocab},
    {"pad_token_id", -1, kInt32Max},
};

struct NumRule {
  const char* key;
  double lo, hi;
  bool lo_open;
};

// Number fields at the top level and in every RoPE parameter set (rope_parameters, its per-layer-type
// children, rope_scaling).
constexpr NumRule kTopNumRules[] = {
    {"rms_norm_eps", 0.0, 1.0, true},
    {"moe_routed_scaling_factor", 0.0, 1e6, true},
    {"moe_router_logit_softcapping", 0.0, 1e6, false},
};
constexpr NumRule kRopeNumRules[] = {
    {"rope_theta", 0.0, 1e12, true},
    {"partial_rotary_factor", 0.0, 1.0, true},
    {"factor", 0.0, 1e6, true},
    {"attention_factor", 0.0, 1e6, true},
    {"beta_fast", 0.0, 1e6, true},
    {"beta_slow", 0.0, 1e6, true},
    {"low_freq_factor", 0.0, 1e6, true},
    {"high_freq_factor", 0.0, 1e6, true},
    {"original_max_position_embeddings", 0.0, static_cast<double>(kMaxPositions), true},
};

Status check_int(const json& v, const std::string& key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    return err("config.json: {} = {} is not an integer (must be in [{}, {}])", key, v.dump(), lo, hi);
  // Compared as the JSON holds it: a value past int64 (stored unsigned) must not wrap into range.
  const bool ok = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi) &&
                                               (lo <= 0 || v.get<uint64_t>() >= static_cast<uint64_t>(lo))
                                         : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!ok)
    return err("config.json: {} = {} is out of range (must be an integer in [{}, {}])", key, v.dump(), lo,
               hi);
  return {};
}

Status check_num(const json& obj, const std::string& where, const NumRule& r) {
  auto it = obj.find(r.key);
  if (it == obj.end() || it->is_null()) return {};
  const std::string key = where.empty() ? r.key : where + "." + r.key;
  if (!it->is_number()) return err("config.json: {} = {} is not a number", key, it->dump());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v > r.hi || (r.lo_open ? v <= r.lo : v < r.lo))
    return err("config.json: {} = {} is out of range (must be a finite number in {}{}, {}])", key, it->dump(),
               r.lo_open ? "(" : "[", r.lo, r.hi);
  return {};
}

Status check_rope_set(const json& p, const std::string& where) {
  if (!p.is_object()) return {};
  for (const auto& r : kRopeNumRules) GRIDQ_RETURN_IF_ERROR(check_num(p, where, r));
  return {};
}

Status check_int_list(const json& c, const char* key, int64_t lo, int64_t hi) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return {};
  if (!it->is_array()) return check_int(*it, key, lo, hi);
  for (size_t i = 0; i < it->size(); ++i)
    GRIDQ_RETURN_IF_ERROR(check_int((*it)[i], fmt::format("{}[{}]", key, i), lo, hi));
  return {};
}

// Numbers nested anywhere: a JSON literal past double's range (1e999) parses as infinity.
Status check_finite(const json& v, const std::string& path) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    return err("config.json: {} = {} is not a finite number", path, v.dump());
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it)
      GRIDQ_RETURN_IF_ERROR(check_finite(it.value(), path.empty() ? it.key() : path + "." + it.key()));
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i)
      GRIDQ_RETURN_IF_ERROR(check_finite(v[i], fmt::format("{}[{}]", path, i)));
  return {};
}

}  // namespace

Status check_config_values(const json& c) {
  if (!c.is_object()) return err("config.json: not a JSON object");
  GRIDQ_RETURN_IF_ERROR(check_finite(c, ""));
  for (const auto& r : kIntRules) {
    auto it = c.find(r.key);
    if (it == c.end() || it->is_null()) continue;
    GRIDQ_RETURN_IF_ERROR(check_int(*it, r.key, r.lo, r.hi));
  }
  GRIDQ_RETURN_IF_ERROR(check_int_list(c, "eos_token_id", 0, kMaxVocab));
  GRIDQ_RETURN_IF_ERROR(check_int_list(c, "num_attention_heads_per_layer", 1, kMaxCount));
  GRIDQ_RETURN_IF_ERROR(check_int_list(c, "mlp_only_layers", 0, kMaxCount));
  for (const auto& r : kTopNumRules) GRIDQ_RETURN_IF_ERROR(check_num(c, "", r));
  GRIDQ_RETURN_IF_ERROR(check_rope_set(c, ""));
  for (const char* set : {"rope_parameters", "rope_scaling"}) {
    auto it = c.find(set);
    if (it == c.end() || !it->is_object()) continue;
    GRIDQ_RETURN_IF_ERROR(check_rope_set(*it, set));
    for (auto sub = it->begin(); sub != it->end(); ++sub)
      if (sub->is_object()) GRIDQ_RETURN_IF_ERROR(check_rope_set(*sub, std::string(set) + "." + sub.key()));
  }
  return {};
}

Status check_spec(const ModelSpec& s) {
  if (s.vocab_size < 1 || s.hidden_size < 1 || s.n_layers < 1)
    return err("config.json: vocab_size {}, hidden_size {} and num_hidden_layers {} must be positive",
               s.vocab_size, s.hidden_size, s.n_layers);
  if (static_cast<int>(s.layers.size()) != s.n_layers)
    return err("model spec: {} layers described for num_hidden_layers {}", s.layers.size(), s.n_layers);
  // The float the runtime uses: a positive eps below fp32's range would be 0 and divide by zero.
  if (!(s.norm_eps > 0.0f) || !std::isfinite(s.norm_eps))
    return err("config.json: rms_norm_eps gives {} in fp32 (must be a positive finite number)", s.norm_eps);
  if (s.max_position_embeddings < 0 || s.max_position_embeddings > kMaxPositions)
    return err("config.json: max_position_embeddings = {} is out of range", s.max_position_embeddings);
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSpec& L = s.layers[l];
    if (L.n_heads < 1 || L.n_kv_heads < 1 || L.n_heads % L.n_kv_heads != 0)
      return err(
          "config.json: layer {} has {} heads and {} KV heads (both positive, heads a multiple of KV heads)",
          l, L.n_heads, L.n_kv_heads);
    if (L.head_dim < 1 || L.head_dim > kMaxDim)
      return err("config.json: layer {} head_dim {} is out of range", l, L.head_dim);
    if (L.window < 0) return err("config.json: layer {} sliding_window {} is negative", l, L.window);
    if (!(L.rope.theta > 0.0) || !std::isfinite(L.rope.theta))
      return err("config.json: layer {} rope_theta {} must be a positive finite number", l, L.rope.theta);
    for (float f : L.rope.inv_freq)
      if (!std::isfinite(f))
        return err("config.json: layer {} RoPE parameters give a non-finite inverse frequency", l);
    if (!std::isfinite(L.rope.attention_factor))
      return err("config.json: layer {} RoPE attention_factor is not finite", l);
  }
  if (s.has_moe()) {
    const MoeSpec& m = s.moe;
    if (m.n_experts < 1 || m.top_k < 1 || m.top_k > m.n_experts || m.expert_intermediate < 1)
      return err(
          "config.json: num_experts {}, num_experts_per_tok {}, moe_intermediate_size {} are inconsistent",
          m.n_experts, m.top_k, m.expert_intermediate);
    if (!(m.routed_scaling > 0.0f) || !std::isfinite(m.routed_scaling))
      return err("config.json: moe_routed_scaling_factor gives {} (must be positive and finite)",
                 m.routed_scaling);
  }
  if (s.bos_token_id < -1 || s.bos_token_id >= s.vocab_size)
    return err("config.json: bos_token_id {} is not a token id in [0, {})", s.bos_token_id, s.vocab_size);
  for (int e : s.eos_token_ids)
    if (e < 0 || e >= s.vocab_size)
      return err("config.json: eos_token_id {} is not a token id in [0, {})", e, s.vocab_size);
  return {};
}

}  // namespace gridq::model

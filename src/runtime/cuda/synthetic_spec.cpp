// The synthetic models' shapes (synthetic_model.h): the model specs and Hugging Face configs of the known
// names; synthetic_model.cpp builds their weights on the device.
#include <algorithm>

#include "core/numerics.h"
#include "runtime/cuda/synthetic_model.h"

namespace gridq::cuda {
namespace {

struct Cfg {
  int vocab, hidden, layers, heads_full, heads_sliding, n_kv, window, dense_inter, experts, top_k, inter,
      shared_inter, max_pos, bos, pad;
  std::vector<int> eos;
  double yarn_f, yarn_l0, beta_fast, beta_slow, yarn_m;
  bool tiny_pattern;  // full, sliding, sliding, full (else [full, sliding×3] repeated)
};

Expected<Cfg> config(const std::string& name) {
  // laguna.md §2.
  if (name == "laguna-s-2.1")
    return Cfg{100352, 3072,    48,    48,     72,   8,       512,
               12288,  256,     10,    1024,   1024, 1048576, 2,
               9,      {2, 24}, 128.0, 8192.0, 32.0, 1.0,     1.4852030263919618,
               false};
  if (name == "laguna-xs-2.1")
    return Cfg{100352, 2048,    40,   48,     64,   8,      512,
               8192,   256,     8,    512,    512,  262144, 2,
               9,      {2, 24}, 32.0, 8192.0, 32.0, 1.0,    1.3465735902799727,
               false};
  if (name == "laguna-tiny-code")
    return Cfg{4096, 512, 4,   4,     6,    2,    64,
               1024, 12,  4,   256,   256,  4096, 0,
               1,    {0}, 8.0, 512.0, 32.0, 1.0,  1.2079441541679836,
               true};
  std::string known;
  for (const auto& n : synthetic_model_names()) known += (known.empty() ? "" : ", ") + n;
  return err("--synthetic '{}' is not a known model (known: {})", name, known);
}

}  // namespace

const std::vector<std::string>& synthetic_model_names() {
  static const std::vector<std::string> names = {"laguna-s-2.1", "laguna-xs-2.1", "laguna-tiny-code"};
  return names;
}

Expected<model::ModelSpec> synthetic_spec(const std::string& name) {
  GRIDQ_ASSIGN_OR_RETURN(Cfg c, config(name));
  model::ModelSpec s;
  s.architecture = "LagunaForCausalLM";
  s.vocab_size = c.vocab;
  s.hidden_size = c.hidden;
  s.n_layers = c.layers;
  s.norm_eps = 1e-6f;
  s.max_position_embeddings = c.max_pos;
  s.tie_word_embeddings = false;
  s.bos_token_id = c.bos;
  s.eos_token_ids = c.eos;
  s.pad_token_id = c.pad;
  auto& m = s.moe;
  m.n_experts = c.experts;
  m.top_k = c.top_k;
  m.expert_intermediate = c.inter;
  m.shared_intermediate = c.shared_inter;
  m.routed_scaling = 2.5f;
  m.score = model::RouterScore::kSigmoid;
  m.renormalize = true;
  m.has_bias = true;  // e_score_correction_bias (S-2.1 F32; laguna-tiny-code BF16 zeros)
  m.shared_gated = false;
  constexpr int kHeadDim = 128;
  // rope_parameters: full layers YaRN θ 5e5, partial 0.5 (r = 64), explicit attention_factor; sliding layers
  // default θ 1e4, partial 1.0 (laguna.md §1.3, adapter_util.cpp rope_from_json).
  model::RopeParams full;
  full.type = "yarn";
  full.theta = 500000.0;
  full.rotary_dim = kHeadDim / 2;
  full.attention_factor = static_cast<float>(c.yarn_m);
  full.inv_freq =
      model::rope_yarn_inv_freq(full.theta, full.rotary_dim, c.yarn_f, c.yarn_l0, c.beta_fast, c.beta_slow);
  model::RopeParams sliding;
  sliding.type = "default";
  sliding.theta = 10000.0;
  sliding.rotary_dim = kHeadDim;
  sliding.attention_factor = 1.0f;
  sliding.inv_freq = model::rope_default_inv_freq(sliding.theta, sliding.rotary_dim);
  for (int l = 0; l < c.layers; ++l) {
    model::LayerSpec L;
    const bool is_full = c.tiny_pattern ? (l == 0 || l == c.layers - 1) : (l % 4 == 0);
    L.attn = is_full ? model::AttnKind::kFull : model::AttnKind::kSliding;
    L.n_heads = is_full ? c.heads_full : c.heads_sliding;
    L.n_kv_heads = c.n_kv;
    L.head_dim = kHeadDim;
    L.window = is_full ? 0 : c.window;
    L.rope = is_full ? full : sliding;
    L.gate = model::GateMode::kPerHead;
    L.qk_norm = true;
    L.mlp = l == 0 ? model::MlpKind::kDense : model::MlpKind::kMoe;
    L.dense_intermediate = l == 0 ? c.dense_inter : 0;
    s.layers.push_back(std::move(L));
  }
  return s;
}

uint64_t synthetic_hash(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Expected<nlohmann::json> synthetic_hf_config(const std::string& name, int layers) {
  GRIDQ_ASSIGN_OR_RETURN(Cfg c, config(name));
  if (layers < 1 || layers > c.layers) return err("{}: {} layers (it has 1..{})", name, layers, c.layers);
  GRIDQ_ASSIGN_OR_RETURN(model::ModelSpec s, synthetic_spec(name));
  nlohmann::json types = nlohmann::json::array(), mlp = nlohmann::json::array(),
                 heads = nlohmann::json::array();
  for (int l = 0; l < layers; ++l) {
    const auto& L = s.layers[static_cast<size_t>(l)];
    types.push_back(L.attn == model::AttnKind::kFull ? "full_attention" : "sliding_attention");
    mlp.push_back(L.mlp == model::MlpKind::kDense ? "dense" : "sparse");
    heads.push_back(L.n_heads);
  }
  const double partial = 0.5;  // full layers rotate half of each head (synthetic_spec: rotary_dim = d / 2)
  return nlohmann::json{
      {"architectures", {"LagunaForCausalLM"}},
      {"model_type", "laguna"},
      {"attention_bias", false},
      {"bos_token_id", c.bos},
      {"eos_token_id", c.eos},
      {"pad_token_id", c.pad},
      {"gating", true},
      {"head_dim", s.layers[0].head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.dense_inter},
      {"layer_types", types},
      {"mlp_layer_types", mlp},
      {"max_position_embeddings", c.max_pos},
      {"moe_apply_router_weight_on_input", false},
      {"moe_intermediate_size", c.inter},
      {"moe_routed_scaling_factor", s.moe.routed_scaling},
      {"moe_router_logit_softcapping", 0.0},
      {"num_attention_heads", c.heads_full},
      {"num_attention_heads_per_layer", heads},
      {"num_experts", c.experts},
      {"num_experts_per_tok", c.top_k},
      {"num_hidden_layers", layers},
      {"num_key_value_heads", c.n_kv},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters",
       {{"full_attention",
         {{"attention_factor", c.yarn_m},
          {"beta_fast", c.beta_fast},
          {"beta_slow", c.beta_slow},
          {"factor", c.yarn_f},
          {"original_max_position_embeddings", c.yarn_l0},
          {"partial_rotary_factor", partial},
          {"rope_theta", 500000.0},
          {"rope_type", "yarn"}}},
        {"sliding_attention",
         {{"partial_rotary_factor", 1.0}, {"rope_theta", 10000.0}, {"rope_type", "default"}}}}},
      {"shared_expert_intermediate_size", c.shared_inter},
      {"sliding_window", c.window},
      {"tie_word_embeddings", false},
      {"dtype", "bfloat16"},
      {"vocab_size", c.vocab}};
}

}  // namespace gridq::cuda

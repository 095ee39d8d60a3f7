// One canonical description of a decoder-only (MoE) language model, produced by an architecture adapter
// (laguna.cpp, qwen3_moe.cpp, llama.cpp) from config.json and the checkpoint's tensor names. Everything
// downstream (runtime, quantizer, exporter) reads only this and the WeightMap, never the raw config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gridq::model {

enum class AttnKind { kFull, kSliding };
// Output gate applied to the attention output before o_proj (laguna.md §1.3 step 6).
enum class GateMode { kNone, kPerHead, kPerElement };
enum class MlpKind { kDense, kMoe };
// kSigmoid: Laguna (sigmoid scores, bias selects only, always renormalised). kSoftmax: Qwen3-MoE.
enum class RouterScore { kSigmoid, kSoftmax };

struct RopeParams {
  std::string type;              // "default", "yarn", "llama3" (informational; inv_freq is what counts)
  double theta = 10000.0;
  int rotary_dim = 0;            // r: the first r dims of each head rotate (NeoX rotate-half)
  float attention_factor = 1.0f; // m: multiplies both cos and sin
  std::vector<float> inv_freq;   // [r/2], computed in fp32 exactly as laguna.md §1.3
};

struct LayerSpec {
  AttnKind attn = AttnKind::kFull;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int window = 0;  // sliding layers: key j visible to query i iff i - window < j <= i; 0 = unwindowed
  RopeParams rope;
  GateMode gate = GateMode::kNone;
  bool qk_norm = false;  // per-head RMSNorm of q and k before RoPE
  MlpKind mlp = MlpKind::kDense;
  int dense_intermediate = 0;  // kDense only
};

struct MoeSpec {
  int n_experts = 0;
  int top_k = 0;
  int expert_intermediate = 0;
  int shared_intermediate = 0;  // 0 = no shared expert
  float routed_scaling = 1.0f;  // multiplies the routed sum only
  RouterScore score = RouterScore::kSigmoid;
  bool renormalize = true;      // w_j = s_j / sum over chosen
  bool has_bias = false;        // e_score_correction_bias: selection only
  bool shared_gated = false;    // Qwen2-MoE style sigmoid gate on the shared expert (no adapter sets it yet)
};

struct ModelSpec {
  std::string architecture;  // e.g. "LagunaForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int n_layers = 0;
  float norm_eps = 1e-6f;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<LayerSpec> layers;
  MoeSpec moe;  // meaningful iff some layer is kMoe
  int bos_token_id = -1;  // -1 = none
  std::vector<int> eos_token_ids;
  int pad_token_id = -1;

  bool has_moe() const {
    for (const auto& l : layers)
      if (l.mlp == MlpKind::kMoe) return true;
    return false;
  }
  int max_window() const {
    int w = 0;
    for (const auto& l : layers) w = l.window > w ? l.window : w;
    return w;
  }
};

// Plain RoPE: inv_freq_i = theta^(-2i/r), in fp32.
std::vector<float> rope_default_inv_freq(double theta, int rotary_dim);

// YaRN per laguna.md §1.3 / transformers _compute_yarn_parameters, fp32 arithmetic like torch.
std::vector<float> rope_yarn_inv_freq(double theta, int rotary_dim, double factor, double original_max_pos,
                                      double beta_fast, double beta_slow);

// Llama-3 frequency scaling (transformers _compute_llama3_parameters).
std::vector<float> rope_llama3_inv_freq(double theta, int rotary_dim, double factor, double low_freq_factor,
                                        double high_freq_factor, double original_max_pos);

}  // namespace gridq::model

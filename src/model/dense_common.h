// Pieces shared by the Llama-lineage adapters (llama.cpp, qwen3_moe.cpp): standard attention blocks
// without gate, default/llama3 RoPE from either rope_parameters or the older rope_theta/rope_scaling keys.
#pragma once

#include "model/adapter_util.h"

namespace gridq::model::detail {

// Global settings common to Llama/Qwen3 configs.
Status read_llama_globals(const nlohmann::json& c, ModelSpec& s, int& head_dim, int& n_heads, int& n_kv);
// The single RoPE set of a Llama-style config.
Expected<RopeParams> llama_rope(const nlohmann::json& c, int head_dim, int max_pos);
// Norms + q/k/v/o (+ q/k norms when qk_norm) of layer l.
Status claim_llama_attention(TensorClaimer& cl, WeightMap& w, int l, const LayerSpec& L, int hidden);
// Embedding, final norm and lm_head (tied to the embedding when the config says so and lm_head is absent).
Status claim_llama_ends(TensorClaimer& cl, WeightMap& w, const ModelSpec& s);

}  // namespace gridq::model::detail

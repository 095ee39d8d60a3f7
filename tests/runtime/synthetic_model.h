// Hand-built tiny Laguna models held in memory (config JSON + BF16 tensors), run through the real
// adapter, weight builder and CPU backend. Used where the shipped model cannot show a property (non-zero
// router bias, a window of 4, fused expert stacks).
#pragma once

#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "model/loader.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace gridq::testing {

struct TensorStore {
  std::deque<std::vector<uint8_t>> bytes;
  std::deque<io::TensorInfo> infos;
  model::TensorTable table;

  // BF16 tensor from fp32 values (rounded RNE).
  void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    auto& b = bytes.emplace_back(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    auto& info = infos.emplace_back();
    info.name = name;
    info.dtype = io::DType::BF16;
    info.shape = std::move(shape);
    info.begin = 0;
    info.end = b.size();
    info.data = b.data();
    table[name] = &info;
  }
  // Values actually stored (BF16-rounded), for references.
  std::vector<float> get(const std::string& name) const {
    const io::TensorInfo* t = table.at(name);
    std::vector<float> out(t->nbytes() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      out[i] = bf16_to_f32(h);
    }
    return out;
  }
};

inline std::vector<float> synth_randn(size_t n, std::mt19937& g, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct SynthModelOptions {
  int hidden = 16;
  int vocab = 16;
  int layers = 1;
  std::vector<std::string> layer_types = {"full_attention"};
  std::vector<std::string> mlp_types = {"sparse"};
  int heads = 2;
  int kv_heads = 1;
  int head_dim = 8;
  int window = 4;
  int experts = 4;
  int top_k = 2;
  int expert_inter = 8;
  int shared_inter = 8;
  int dense_inter = 16;
  float routed_scaling = 2.5f;
  bool fused_experts = false;
  bool zero_attention = false;  // o_proj = 0: attention adds nothing to the residual
  std::vector<float> router_bias;  // empty: zeros
  uint32_t seed = 1;
};

inline nlohmann::json synthetic_config(const SynthModelOptions& o) {
  nlohmann::json c;
  c["architectures"] = {"LagunaForCausalLM"};
  c["vocab_size"] = o.vocab;
  c["hidden_size"] = o.hidden;
  c["num_hidden_layers"] = o.layers;
  c["num_attention_heads"] = o.heads;
  c["num_attention_heads_per_layer"] = std::vector<int>(static_cast<size_t>(o.layers), o.heads);
  c["num_key_value_heads"] = o.kv_heads;
  c["head_dim"] = o.head_dim;
  c["sliding_window"] = o.window;
  c["layer_types"] = o.layer_types;
  c["mlp_layer_types"] = o.mlp_types;
  c["intermediate_size"] = o.dense_inter;
  c["num_experts"] = o.experts;
  c["num_experts_per_tok"] = o.top_k;
  c["moe_intermediate_size"] = o.expert_inter;
  c["shared_expert_intermediate_size"] = o.shared_inter;
  c["moe_routed_scaling_factor"] = o.routed_scaling;
  c["rms_norm_eps"] = 1e-6;
  c["max_position_embeddings"] = 4096;
  c["eos_token_id"] = 0;
  c["bos_token_id"] = 0;
  c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  return c;
}

inline void fill_synthetic(TensorStore& s, const SynthModelOptions& o) {
  std::mt19937 g(o.seed);
  const int H = o.hidden, d = o.head_dim;
  auto mat = [&](const std::string& n, int r, int c) {
    s.add(n, {r, c}, synth_randn(static_cast<size_t>(r) * c, g, 1.0f / std::sqrt(static_cast<float>(c))));
  };
  auto norm = [&](const std::string& n, int len) {
    auto v = synth_randn(static_cast<size_t>(len), g, 0.1f);
    for (auto& x : v) x += 1.0f;
    s.add(n, {len}, v);
  };
  mat("model.embed_tokens.weight", o.vocab, H);
  mat("lm_head.weight", o.vocab, H);
  norm("model.norm.weight", H);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", H);
    norm(p + "post_attention_layernorm.weight", H);
    mat(p + "self_attn.q_proj.weight", o.heads * d, H);
    mat(p + "self_attn.k_proj.weight", o.kv_heads * d, H);
    mat(p + "self_attn.v_proj.weight", o.kv_heads * d, H);
    if (o.zero_attention)
      s.add(p + "self_attn.o_proj.weight", {H, o.heads * d}, std::vector<float>(static_cast<size_t>(H * o.heads * d), 0.0f));
    else
      mat(p + "self_attn.o_proj.weight", H, o.heads * d);
    mat(p + "self_attn.g_proj.weight", o.heads, H);
    norm(p + "self_attn.q_norm.weight", d);
    norm(p + "self_attn.k_norm.weight", d);
    if (o.mlp_types[static_cast<size_t>(l)] == "dense") {
      mat(p + "mlp.gate_proj.weight", o.dense_inter, H);
      mat(p + "mlp.up_proj.weight", o.dense_inter, H);
      mat(p + "mlp.down_proj.weight", H, o.dense_inter);
      continue;
    }
    mat(p + "mlp.gate.weight", o.experts, H);
    std::vector<float> bias = o.router_bias.empty() ? std::vector<float>(static_cast<size_t>(o.experts), 0.0f) : o.router_bias;
    s.add(p + "mlp.experts.e_score_correction_bias", {o.experts}, bias);
    const int I = o.expert_inter;
    if (o.fused_experts) {
      s.add(p + "mlp.experts.gate_up_proj", {o.experts, 2 * I, H},
            synth_randn(static_cast<size_t>(o.experts) * 2 * I * H, g, 1.0f / std::sqrt(static_cast<float>(H))));
      s.add(p + "mlp.experts.down_proj", {o.experts, H, I},
            synth_randn(static_cast<size_t>(o.experts) * H * I, g, 1.0f / std::sqrt(static_cast<float>(I))));
    } else {
      for (int e = 0; e < o.experts; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        mat(q + "gate_proj.weight", I, H);
        mat(q + "up_proj.weight", I, H);
        mat(q + "down_proj.weight", H, I);
      }
    }
    if (o.shared_inter > 0) {
      mat(p + "mlp.shared_expert.gate_proj.weight", o.shared_inter, H);
      mat(p + "mlp.shared_expert.up_proj.weight", o.shared_inter, H);
      mat(p + "mlp.shared_expert.down_proj.weight", H, o.shared_inter);
    }
  }
}

struct SyntheticModel {
  std::shared_ptr<TensorStore> store;
  std::unique_ptr<runtime::Engine> engine;
};

inline SyntheticModel make_synthetic(const SynthModelOptions& o, int prefill_chunk = 512) {
  SyntheticModel m;
  m.store = std::make_shared<TensorStore>();
  fill_synthetic(*m.store, o);
  auto a = model::adapt(synthetic_config(o), m.store->table);
  EXPECT_TRUE(a.ok()) << a.message();
  if (!a.ok()) return m;
  auto w = runtime::build_model_weights(a->spec, a->weights);
  EXPECT_TRUE(w.ok()) << w.message();
  if (!w.ok()) return m;
  auto be = runtime::cpu::CpuBackend::create(a->spec, std::move(*w), m.store);
  EXPECT_TRUE(be.ok()) << be.message();
  if (!be.ok()) return m;
  runtime::EngineOptions eo;
  eo.prefill_chunk = prefill_chunk;
  m.engine = runtime::Engine::from_backend(std::move(*be), eo);
  return m;
}

}  // namespace gridq::testing

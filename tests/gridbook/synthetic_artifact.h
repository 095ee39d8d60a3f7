// A tiny synthetic gridbook artifact for tests (in the spirit of the gridbook test vectors): a Laguna-shaped config (hidden
// 512, layer 0 dense, layers 1.. MoE with a few experts), routed experts as NVFP4_CB v2 with random legal
// planes and random on-grid codebooks, attention q/k/v/o as compressed-tensors FP8 W8A8, everything else
// BF16 (router bias F32), provenance digests for every codebook table. Everything is held in memory so a
// test can mutate any piece (JSON, tensor bytes, tables) before writing the directory. Header-only so that
// later test binaries (runtime, quant) can include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "core/status.h"
#include "gridbook/quant_config.h"
#include "gridbook/rung.h"
#include "gridbook/sidecar.h"
#include "io/safetensors.h"

namespace gridq::testing {

// config.json of a small Laguna-shaped model from any options struct with the fields layers, hidden, vocab,
// heads, kv_heads, experts, top_k, moe_inter, shared_inter, dense_inter (head_dim 128; layer 0 dense, the
// rest MoE; full and sliding attention alternate; the released model's RoPE parameters).
template <class O>
nlohmann::json laguna_config_json(const O& o) {
  nlohmann::json cfg = {{"architectures", {"LagunaForCausalLM"}},
                        {"model_type", "laguna"},
                        {"hidden_size", o.hidden},
                        {"vocab_size", o.vocab},
                        {"num_hidden_layers", o.layers},
                        {"head_dim", 128},
                        {"num_attention_heads", o.heads},
                        {"num_key_value_heads", o.kv_heads},
                        {"intermediate_size", o.dense_inter},
                        {"moe_intermediate_size", o.moe_inter},
                        {"shared_expert_intermediate_size", o.shared_inter},
                        {"num_experts", o.experts},
                        {"num_experts_per_tok", o.top_k},
                        {"moe_routed_scaling_factor", 2.5},
                        {"rms_norm_eps", 1e-6},
                        {"tie_word_embeddings", false},
                        {"gating", true},
                        {"sliding_window", 64},
                        {"max_position_embeddings", 4096},
                        {"moe_apply_router_weight_on_input", false},
                        {"moe_router_logit_softcapping", 0.0},
                        {"torch_dtype", "bfloat16"}};
  nlohmann::json heads = nlohmann::json::array(), lt = nlohmann::json::array(), mt = nlohmann::json::array();
  for (int l = 0; l < o.layers; ++l) {
    heads.push_back(o.heads);
    lt.push_back(l % 2 == 0 ? "full_attention" : "sliding_attention");
    mt.push_back(l == 0 ? "dense" : "sparse");
  }
  cfg["num_attention_heads_per_layer"] = heads;
  cfg["layer_types"] = lt;
  cfg["mlp_layer_types"] = mt;
  cfg["rope_parameters"] = {
      {"full_attention",
       {{"rope_type", "yarn"},
        {"rope_theta", 500000.0},
        {"factor", 8.0},
        {"original_max_position_embeddings", 512},
        {"beta_fast", 32.0},
        {"beta_slow", 1.0},
        {"attention_factor", 1.2079441541679836},
        {"partial_rotary_factor", 0.5}}},
      {"sliding_attention",
       {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 1.0}}}};
  return cfg;
}

struct SyntheticOptions {
  int layers = 3;  // layer 0 dense; layers 1.. MoE
  int hidden = 512;
  int vocab = 256;
  int heads = 4;  // query heads per layer (q width heads·128)
  int kv_heads = 2;
  int experts = 8;
  int top_k = 2;
  int moe_inter = 256;
  int shared_inter = 256;
  int dense_inter = 512;
  std::vector<int> expert_k = {12, 16};  // NVFP4_CB_K{k} v2 per MoE layer (cycled)
  bool fp8_attention = true;             // q/k/v/o as compressed-tensors FP8; false: BF16 listed in ignore
  uint64_t seed = 1;
};

struct SynthTensor {
  std::string name;
  io::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct SyntheticArtifact {
  nlohmann::json config;                        // config.json, with the gridbook quantization_config stub
  nlohmann::json quant_config;                  // quant_config.json
  std::vector<SynthTensor> tensors;             // model.safetensors
  std::vector<gridbook::CodebookTable> tables;  // cb_codebooks.pqcb

  SynthTensor* find(const std::string& name) {
    for (auto& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  bool remove(const std::string& name) {
    for (auto it = tensors.begin(); it != tensors.end(); ++it) {
      if (it->name == name) {
        tensors.erase(it);
        return true;
      }
    }
    return false;
  }
  gridbook::CodebookTable* table(const std::string& name) {
    for (auto& t : tables) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  // Recomputes provenance.codebook_sha256 from the current tables.
  void refresh_provenance() {
    quant_config["provenance"]["codebook_sha256"] = gridbook::codebook_digests(tables);
  }

  // Writes config.json, quant_config.json, model.safetensors and cb_codebooks.pqcb into `dir` (created).
  Status write(const std::string& dir) const {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return err("{}: cannot create: {}", dir, ec.message());
    auto write_json = [&](const std::string& file, const nlohmann::json& j) -> Status {
      std::ofstream f(std::filesystem::path(dir) / file, std::ios::binary | std::ios::trunc);
      f << j.dump(2) << "\n";
      return f ? Status() : Status(err("{}/{}: write failed", dir, file));
    };
    GRIDQ_RETURN_IF_ERROR(write_json("config.json", config));
    GRIDQ_RETURN_IF_ERROR(write_json("quant_config.json", quant_config));
    std::vector<io::SafetensorsWriter::Decl> decls;
    for (const auto& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
    GRIDQ_ASSIGN_OR_RETURN(auto w, io::SafetensorsWriter::create(
                                       (std::filesystem::path(dir) / "model.safetensors").string(), decls));
    for (const auto& t : tensors) GRIDQ_RETURN_IF_ERROR(w->write(t.bytes));
    GRIDQ_RETURN_IF_ERROR(w->finish());
    return gridbook::write_sidecar((std::filesystem::path(dir) / "cb_codebooks.pqcb").string(), tables);
  }
};

namespace synthetic_detail {

inline std::vector<uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    b[2 * i] = static_cast<uint8_t>(h & 0xFF);
    b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
  return b;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace synthetic_detail

// Packed NVFP4 CB v2 bytes for a stacked tensor [E, rows, in/256·ts]: random index streams and random planes
// with E in 121..133, where all 16 codes are legal (format.md §6.2), so every plane is legal.
inline std::vector<uint8_t> random_cb_v2_bytes(std::mt19937_64& rng, const gridbook::Rung& r,
                                               int64_t n_superblocks) {
  std::vector<uint8_t> out(static_cast<size_t>(n_superblocks * r.type_size()));
  std::uniform_int_distribution<int> byte(0, 255), e(121, 133), code(0, 15);
  for (int64_t s = 0; s < n_superblocks; ++s) {
    uint8_t* sb = out.data() + s * r.type_size();
    for (int i = 0; i < r.index_bytes(); ++i) sb[i] = static_cast<uint8_t>(byte(rng));
    uint8_t* plane = sb + r.index_bytes();
    plane[0] = static_cast<uint8_t>(e(rng));
    for (int i = 0; i < 8; ++i) plane[1 + i] = static_cast<uint8_t>(code(rng) | (code(rng) << 4));
  }
  return out;
}

// Random on-grid E2M1 product tables for `r` named cb_codebook.lattice.<fmt>.sub{i}.
inline std::vector<gridbook::CodebookTable> random_fp4_tables(std::mt19937_64& rng, const gridbook::Rung& r) {
  static constexpr float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<gridbook::CodebookTable> out;
  const std::vector<int> widths = gridbook::bit_split(r.k, r.n_sub());
  for (int i = 0; i < r.n_sub(); ++i) {
    gridbook::CodebookTable t;
    t.name = gridbook::codebook_table_name("lattice", r, i);
    t.rows = int64_t{1} << widths[i];
    t.cols = gridbook::kVecDim / r.n_sub();
    for (int64_t j = 0; j < t.rows * t.cols; ++j) {
      const int p = pick(rng);
      const float v = (p & 8) ? -kGrid[p & 7] : kGrid[p & 7];
      t.f16.push_back(f32_to_f16(v));
    }
    t.sha256 = gridbook::codebook_digest(t.f16);
    out.push_back(std::move(t));
  }
  return out;
}

inline SyntheticArtifact make_synthetic_artifact(const SyntheticOptions& o = {}) {
  using nlohmann::json;
  using synthetic_detail::bf16_bytes;
  using synthetic_detail::f32_bytes;
  using synthetic_detail::numel;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  SyntheticArtifact a;
  const int64_t H = o.hidden, d = 128, q_w = int64_t{o.heads} * d, kv_w = int64_t{o.kv_heads} * d;

  json cfg = laguna_config_json(o);
  gridbook::QuantizationStub stub;
  stub.format = "nvfp4_cb";
  cfg["quantization_config"] = gridbook::emit_quantization_stub(stub);
  a.config = cfg;

  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape, float fill = NAN) {
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (auto& x : v) x = std::isnan(fill) ? normal(rng) : fill;
    a.tensors.push_back({name, io::DType::BF16, shape, bf16_bytes(v)});
  };
  auto fp8 = [&](const std::string& name, int64_t rows, int64_t in) {
    std::vector<uint8_t> w(static_cast<size_t>(rows * in));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : w) {
      do b = static_cast<uint8_t>(byte(rng));
      while ((b & 0x7F) == 0x7F);  // E4M3 NaN
    }
    std::uniform_real_distribution<float> sc(1e-4f, 1e-2f);
    std::vector<float> s(static_cast<size_t>(rows));
    for (auto& x : s) x = sc(rng);
    a.tensors.push_back({name + ".weight", io::DType::F8_E4M3, {rows, in}, std::move(w)});
    a.tensors.push_back({name + ".weight_scale", io::DType::F32, {rows, 1}, f32_bytes(s)});
  };

  json ignore = json::array();
  json groups = json::object();
  json attn_targets = json::array();
  bf16("model.embed_tokens.weight", {o.vocab, H});
  ignore.push_back("model.embed_tokens");
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    bf16(p + "input_layernorm.weight", {H}, 1.0f);
    bf16(p + "post_attention_layernorm.weight", {H}, 1.0f);
    bf16(p + "self_attn.q_norm.weight", {d}, 1.0f);
    bf16(p + "self_attn.k_norm.weight", {d}, 1.0f);
    const std::pair<const char*, std::pair<int64_t, int64_t>> attn[] = {
        {"q_proj", {q_w, H}}, {"k_proj", {kv_w, H}}, {"v_proj", {kv_w, H}}, {"o_proj", {H, q_w}}};
    for (const auto& [leaf, shape] : attn) {
      if (o.fp8_attention) {
        fp8(p + "self_attn." + leaf, shape.first, shape.second);
      } else {
        bf16(p + "self_attn." + leaf + ".weight", {shape.first, shape.second});
        ignore.push_back(p + "self_attn." + leaf);
      }
    }
    bf16(p + "self_attn.g_proj.weight", {o.heads, H});
    ignore.push_back(p + "self_attn.g_proj");
    if (l == 0) {
      for (const char* leaf : {"gate_proj", "up_proj"}) {
        bf16(p + "mlp." + leaf + ".weight", {o.dense_inter, H});
        ignore.push_back(p + "mlp." + leaf);
      }
      bf16(p + "mlp.down_proj.weight", {H, o.dense_inter});
      ignore.push_back(p + "mlp.down_proj");
      continue;
    }
    bf16(p + "mlp.gate.weight", {o.experts, H});
    ignore.push_back(p + "mlp.gate");
    a.tensors.push_back({p + "mlp.experts.e_score_correction_bias",
                         io::DType::F32,
                         {o.experts},
                         f32_bytes(std::vector<float>(static_cast<size_t>(o.experts), 0.0f))});
    ignore.push_back(p + "mlp.experts.e_score_correction_bias");
    const int k = o.expert_k[static_cast<size_t>(l - 1) % o.expert_k.size()];
    const gridbook::Rung rung{gridbook::Grid::FP4, gridbook::Mode::Product, k, 2};
    const std::pair<const char*, std::pair<int64_t, int64_t>> stacks[] = {
        {"gate_up_proj", {2 * int64_t{o.moe_inter}, H}}, {"down_proj", {H, o.moe_inter}}};
    json targets = json::array();
    for (const auto& [leaf, shape] : stacks) {
      const int64_t sbs = (shape.second + 255) / 256;  // ceil: lets a test build an in % 256 != 0 target
      a.tensors.push_back({p + "mlp.experts." + leaf + ".cb_qweight",
                           io::DType::U8,
                           {o.experts, shape.first, sbs * rung.type_size()},
                           random_cb_v2_bytes(rng, rung, o.experts * shape.first * sbs)});
      targets.push_back(p + "mlp.experts." + leaf);
    }
    const std::string gname = fmt::format("routed_k{}", k);
    if (!groups.contains(gname)) {
      gridbook::ConfigGroup g{gname, {}, rung.name(), gridbook::make_cb_scheme(rung)};
      gridbook::QuantConfig tmp;
      tmp.groups.push_back(g);
      groups[gname] = gridbook::emit_quant_config(tmp)["config_groups"][gname];
      groups[gname]["targets"] = json::array();
      for (auto& t : random_fp4_tables(rng, rung)) a.tables.push_back(std::move(t));
    }
    for (auto& t : targets) groups[gname]["targets"].push_back(t);
    for (const char* leaf : {"gate_proj", "up_proj"}) {
      bf16(p + "mlp.shared_expert." + leaf + ".weight", {o.shared_inter, H});
      ignore.push_back(p + "mlp.shared_expert." + leaf);
    }
    bf16(p + "mlp.shared_expert.down_proj.weight", {H, o.shared_inter});
    ignore.push_back(p + "mlp.shared_expert.down_proj");
  }
  bf16("model.norm.weight", {H}, 1.0f);
  ignore.push_back("model.norm");
  bf16("lm_head.weight", {o.vocab, H});
  ignore.push_back("lm_head");
  if (o.fp8_attention) {
    json g = gridbook::fp8_dynamic_group_body();
    g["targets"] = json::array({R"(re:model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj$)"});
    groups["attention_fp8"] = g;
  }
  a.quant_config = {{"quant_method", "gridbook"},
                    {"format", "nvfp4_cb"},
                    {"layout_version", 2},
                    {"config_groups", groups},
                    {"ignore", ignore}};
  a.refresh_provenance();
  return a;
}

}  // namespace gridq::testing

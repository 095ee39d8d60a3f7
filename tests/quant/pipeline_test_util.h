// Helpers for the export / pipeline tests: a small BF16 Laguna-shaped Hugging Face checkpoint written to disk
// (per-expert tensors, as released checkpoints store them; optionally the bundled tokenizer so the layer
// streamer can tokenize), and synthetic layer captures (InputStats from correlated random rows) so the
// encode + export path can be tested without the streamer.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../gridbook/synthetic_artifact.h"
#include "../runtime/parity_util.h"
#include "core/numerics.h"
#include "io/safetensors.h"
#include "io/sha256.h"
#include "quant/capture.h"
#include "quant/encode_tensor.h"
#include "quant_test_util.h"

namespace gridq::quant::testing {

struct TinyLaguna {
  // Every width is one 256-column superblock, so encoding stays cheap (also under ASan).
  int layers = 2;  // layer 0 dense, the rest MoE
  int hidden = 256;
  int vocab = 256;
  int heads = 2;  // q width heads·128 == hidden
  int kv_heads = 1;
  int experts = 2;
  int top_k = 1;
  int moe_inter = 256;
  int shared_inter = 256;
  int dense_inter = 256;
  bool copy_tokenizer = false;  // copy tokenizer.json etc. from models/laguna-tiny-code (sets vocab 4096)
  uint64_t seed = 7;
};

// A per-process path under the temp directory for a test's files: <tmp>/gridq_<suite>_<pid>_<tag>.
inline std::string test_tmp_dir(const std::string& suite, const std::string& tag) {
  return (std::filesystem::temp_directory_path() / fmt::format("gridq_{}_{}_{}", suite, ::getpid(), tag))
      .string();
}

inline nlohmann::json tiny_laguna_config(const TinyLaguna& o) {
  nlohmann::json cfg = gridq::testing::laguna_config_json(o);
  cfg["bos_token_id"] = 0;
  cfg["eos_token_id"] = 0;
  cfg["pad_token_id"] = 1;
  return cfg;
}

// Writes config.json + model.safetensors (BF16; the router bias F32) into `dir`. Norm weights are 1 + noise,
// Linear weights N(0, 0.02²). Returns the config.
inline nlohmann::json write_tiny_laguna(const std::string& dir, TinyLaguna o) {
  namespace fs = std::filesystem;
  if (o.copy_tokenizer) o.vocab = 4096;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const nlohmann::json cfg = tiny_laguna_config(o);
  std::ofstream(fs::path(dir) / "config.json") << cfg.dump(2) << "\n";
  if (o.copy_tokenizer) {
    for (const char* f :
         {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"})
      fs::copy_file(gridq::testing::repo_path(std::string("models/laguna-tiny-code/") + f),
                    fs::path(dir) / f);
  }
  struct T {
    std::string name;
    io::DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> ts;
  uint64_t seed = o.seed;
  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape, float base, float sigma) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v = gaussian(static_cast<size_t>(n), ++seed, sigma);
    std::vector<uint8_t> b(static_cast<size_t>(n) * 2);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(base + v[static_cast<size_t>(i)]);
      b[2 * i] = static_cast<uint8_t>(h & 0xFF);
      b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    ts.push_back({name, io::DType::BF16, shape, std::move(b)});
  };
  const int64_t H = o.hidden, d = 128, qw = int64_t{o.heads} * d, kvw = int64_t{o.kv_heads} * d;
  bf16("model.embed_tokens.weight", {o.vocab, H}, 0.0f, 1.0f);
  for (int l = 0; l < o.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    bf16(p + "input_layernorm.weight", {H}, 1.0f, 0.05f);
    bf16(p + "post_attention_layernorm.weight", {H}, 1.0f, 0.05f);
    bf16(p + "self_attn.q_norm.weight", {d}, 1.0f, 0.05f);
    bf16(p + "self_attn.k_norm.weight", {d}, 1.0f, 0.05f);
    bf16(p + "self_attn.q_proj.weight", {qw, H}, 0.0f, 0.02f);
    bf16(p + "self_attn.k_proj.weight", {kvw, H}, 0.0f, 0.02f);
    bf16(p + "self_attn.v_proj.weight", {kvw, H}, 0.0f, 0.02f);
    bf16(p + "self_attn.o_proj.weight", {H, qw}, 0.0f, 0.02f);
    bf16(p + "self_attn.g_proj.weight", {o.heads, H}, 0.0f, 0.02f);
    if (l == 0) {
      bf16(p + "mlp.gate_proj.weight", {o.dense_inter, H}, 0.0f, 0.02f);
      bf16(p + "mlp.up_proj.weight", {o.dense_inter, H}, 0.0f, 0.02f);
      bf16(p + "mlp.down_proj.weight", {H, o.dense_inter}, 0.0f, 0.02f);
      continue;
    }
    bf16(p + "mlp.gate.weight", {o.experts, H}, 0.0f, 0.02f);
    {
      std::vector<float> bias(static_cast<size_t>(o.experts));
      for (int e = 0; e < o.experts; ++e) bias[static_cast<size_t>(e)] = 0.01f * static_cast<float>(e);
      std::vector<uint8_t> b(bias.size() * 4);
      std::memcpy(b.data(), bias.data(), b.size());
      ts.push_back({p + "mlp.experts.e_score_correction_bias", io::DType::F32, {o.experts}, std::move(b)});
    }
    for (int e = 0; e < o.experts; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      bf16(q + "gate_proj.weight", {o.moe_inter, H}, 0.0f, 0.02f);
      bf16(q + "up_proj.weight", {o.moe_inter, H}, 0.0f, 0.02f);
      bf16(q + "down_proj.weight", {H, o.moe_inter}, 0.0f, 0.02f);
    }
    bf16(p + "mlp.shared_expert.gate_proj.weight", {o.shared_inter, H}, 0.0f, 0.02f);
    bf16(p + "mlp.shared_expert.up_proj.weight", {o.shared_inter, H}, 0.0f, 0.02f);
    bf16(p + "mlp.shared_expert.down_proj.weight", {H, o.shared_inter}, 0.0f, 0.02f);
  }
  bf16("model.norm.weight", {H}, 1.0f, 0.05f);
  bf16("lm_head.weight", {o.vocab, H}, 0.0f, 0.02f);
  std::vector<io::SafetensorsWriter::Decl> decls;
  for (const auto& t : ts) decls.push_back({t.name, t.dtype, t.shape});
  auto w = io::SafetensorsWriter::create((fs::path(dir) / "model.safetensors").string(), decls);
  if (!w.ok()) return cfg;
  for (const auto& t : ts) (void)(*w)->write(t.bytes);
  (void)(*w)->finish();
  return cfg;
}

// InputStats of n correlated rows (plus n_hold holdout rows) of width C. Rows of one width are shared: the
// Gram product is the expensive part.
inline InputStats synthetic_stats(const std::string& name, int C, int64_t n, int64_t n_hold, uint64_t seed) {
  InputStats s;
  s.name = name;
  s.cols = C;
  Correlated corr(C, seed);
  const std::vector<float> X = corr.rows(n, seed + 1);
  s.n = n;
  s.H = gram(X, n, C);
  s.imatrix.assign(static_cast<size_t>(C), 0.0f);
  if (n > 0)
    for (int j = 0; j < C; ++j)
      s.imatrix[static_cast<size_t>(j)] = s.H[static_cast<size_t>(j) * C + j] / float(n);
  s.n_hold = n_hold;
  s.holdout = corr.rows(n_hold, seed + 2);
  return s;
}

inline InputStats renamed(InputStats s, const std::string& name) {
  s.name = name;
  return s;
}

inline InputStats cold_stats(const std::string& name, int C) {
  InputStats s;
  s.name = name;
  s.cols = C;
  s.H.assign(static_cast<size_t>(C) * C, 0.0f);
  s.imatrix.assign(static_cast<size_t>(C), 0.0f);
  return s;
}

// A full LayerCapture for TinyLaguna layer l from two shared row pools (widths hidden and the inner width).
// Expert `cold_expert` gets no rows (a cold expert).
inline LayerCapture synthetic_capture(const TinyLaguna& o, int l, const InputStats& wide,
                                      const InputStats& narrow, int cold_expert = -1) {
  LayerCapture c;
  c.layer = l;
  const std::string p = "layers." + std::to_string(l) + ".";
  c.attn_in = renamed(wide, p + "attn_in");
  c.o_in = renamed(wide, p + "o_in");  // heads·128 == hidden in TinyLaguna
  c.mlp_in = renamed(wide, p + "mlp_in");
  if (l == 0) {
    c.dense_down_in = renamed(wide, p + "dense_down_in");  // dense_inter == hidden
    return c;
  }
  c.shared_down_in = renamed(narrow, p + "shared_down_in");
  for (int e = 0; e < o.experts; ++e) {
    const std::string q = p + "experts." + std::to_string(e);
    if (e == cold_expert) {
      c.expert_in.push_back(cold_stats(q + ".in", o.hidden));
      c.expert_down_in.push_back(cold_stats(q + ".down_in", o.moe_inter));
      c.expert_counts.push_back(0);
    } else {
      c.expert_in.push_back(renamed(wide, q + ".in"));
      c.expert_down_in.push_back(renamed(narrow, q + ".down_in"));
      c.expert_counts.push_back(wide.n);
    }
  }
  c.checks.push_back({p + "attn_in", "rmsnorm", 0.004, 0.05, true});
  return c;
}

// SHA-256 of every regular file under dir, by relative path.
inline std::map<std::string, std::string> dir_digests(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    auto sha = io::sha256_file(e.path().string());
    out[fs::relative(e.path(), dir).string()] = sha.ok() ? *sha : "?";
  }
  return out;
}

// A BF16 source weight [R, C] of gaussian values (σ 0.02); W holds the values as the encoders read them
// (exact BF16), sw the tensor over `bytes`.
struct Bf16Src {
  std::vector<float> W;
  std::vector<uint8_t> bytes;
  SourceWeight sw;
  Bf16Src(const std::string& name, int R, int C, uint64_t seed) : W(gaussian(size_t(R) * C, seed, 0.02)) {
    bytes.resize(W.size() * 2);
    for (size_t i = 0; i < W.size(); ++i) {
      const uint16_t h = f32_to_bf16(W[i]);
      W[i] = bf16_to_f32(h);
      bytes[2 * i] = h & 0xFF;
      bytes[2 * i + 1] = h >> 8;
    }
    sw = SourceWeight{name, io::DType::BF16, {R, C}, bytes};
  }
};

}  // namespace gridq::quant::testing

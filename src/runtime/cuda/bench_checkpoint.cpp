// The synthetic HF checkpoint writer (bench_checkpoint.h): tensors declared per shard, each streamed in
// 32 Mi-element pieces generated in parallel.
#include "runtime/cuda/bench_checkpoint.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/numerics.h"
#include "io/safetensors.h"
#include "runtime/cuda/synthetic_model.h"

namespace gridq::cuda {
namespace {

namespace fs = std::filesystem;

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  float lo, hi;
  bool f32 = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// The tensors of decoder layer l (names as model/laguna.cpp reads them).
std::vector<Tensor> layer_tensors(const model::ModelSpec& s, int l) {
  const auto& L = s.layers[static_cast<size_t>(l)];
  const int64_t H = s.hidden_size, d = L.head_dim, qw = int64_t{L.n_heads} * d,
                kvw = int64_t{L.n_kv_heads} * d;
  constexpr float kW = 0.035f;
  const std::string p = fmt::format("model.layers.{}.", l);
  std::vector<Tensor> t = {{p + "input_layernorm.weight", {H}, 0.9f, 1.1f},
                           {p + "post_attention_layernorm.weight", {H}, 0.9f, 1.1f},
                           {p + "self_attn.q_proj.weight", {qw, H}, -kW, kW},
                           {p + "self_attn.k_proj.weight", {kvw, H}, -kW, kW},
                           {p + "self_attn.v_proj.weight", {kvw, H}, -kW, kW},
                           {p + "self_attn.o_proj.weight", {H, qw}, -kW, kW},
                           {p + "self_attn.g_proj.weight", {L.n_heads, H}, -kW, kW},
                           {p + "self_attn.q_norm.weight", {d}, 0.9f, 1.1f},
                           {p + "self_attn.k_norm.weight", {d}, 0.9f, 1.1f}};
  auto swiglu = [&](const std::string& q, int64_t I) {
    t.push_back({q + "gate_proj.weight", {I, H}, -kW, kW});
    t.push_back({q + "up_proj.weight", {I, H}, -kW, kW});
    t.push_back({q + "down_proj.weight", {H, I}, -kW, kW});
  };
  if (L.mlp == model::MlpKind::kDense) {
    swiglu(p + "mlp.", L.dense_intermediate);
    return t;
  }
  const auto& M = s.moe;
  t.push_back({p + "mlp.gate.weight", {M.n_experts, H}, -kW, kW});
  t.push_back({p + "mlp.experts.e_score_correction_bias", {M.n_experts}, -0.01f, 0.01f, true});
  for (int e = 0; e < M.n_experts; ++e) swiglu(fmt::format("{}mlp.experts.{}.", p, e), M.expert_intermediate);
  if (M.shared_intermediate > 0) swiglu(p + "mlp.shared_expert.", M.shared_intermediate);
  return t;
}

Status write_shard(const std::string& path, const std::vector<Tensor>& ts, uint64_t seed, uint64_t& tensor_id,
                   int64_t& bytes) {
  std::vector<io::SafetensorsWriter::Decl> decls;
  for (const Tensor& t : ts) decls.push_back({t.name, t.f32 ? io::DType::F32 : io::DType::BF16, t.shape});
  GRIDQ_ASSIGN_OR_RETURN(auto w, io::SafetensorsWriter::create(path, decls));
  constexpr int64_t kPiece = int64_t{1} << 25;
  std::vector<uint8_t> buf;
  for (const Tensor& t : ts) {
    const uint64_t key = synthetic_hash(seed ^ synthetic_hash(++tensor_id));
    const int64_t n = t.numel(), eb = t.f32 ? 4 : 2;
    for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
      const int64_t m = std::min(kPiece, n - i0);
      buf.resize(static_cast<size_t>(m * eb));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < m; ++i) {
        const double u =
            static_cast<double>(synthetic_hash(key + static_cast<uint64_t>(i0 + i)) >> 11) * 0x1.0p-53;
        const float v = static_cast<float>(t.lo + (t.hi - t.lo) * u);
        if (t.f32) {
          std::memcpy(buf.data() + i * 4, &v, 4);
        } else {
          const uint16_t b = f32_to_bf16(v);
          std::memcpy(buf.data() + i * 2, &b, 2);
        }
      }
      GRIDQ_RETURN_IF_ERROR(w->write(buf));
      bytes += m * eb;
    }
  }
  return w->finish();
}

}  // namespace

Expected<CheckpointResult> write_synthetic_checkpoint(const CheckpointOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.out.empty()) return err("bench checkpoint: --out is required");
  if (fs::exists(o.out))
    return err("bench checkpoint: {} exists (nothing is overwritten; remove it first)", o.out);
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json cfg, synthetic_hf_config(o.shape, o.layers));
  GRIDQ_ASSIGN_OR_RETURN(model::ModelSpec spec, synthetic_spec(o.shape));
  const std::vector<std::string> tok_files = {"tokenizer.json", "tokenizer_config.json",
                                              "chat_template.jinja", "generation_config.json"};
  if (!fs::exists(fs::path(o.tokenizer_from) / "tokenizer.json"))
    return err("bench checkpoint: {} has no tokenizer.json (--tokenizer-from names a model directory)",
               o.tokenizer_from);
  const std::string tmp = o.out + ".partial";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return err("bench checkpoint: cannot create {}: {}", tmp, ec.message());
  const int n_shards = o.layers + 1;
  auto shard_name = [&](int i) { return fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, n_shards); };
  const int64_t H = spec.hidden_size, V = spec.vocab_size;
  std::vector<std::vector<Tensor>> shards = {{{"model.embed_tokens.weight", {V, H}, -0.05f, 0.05f},
                                              {"model.norm.weight", {H}, 0.9f, 1.1f},
                                              {"lm_head.weight", {V, H}, -0.035f, 0.035f}}};
  for (int l = 0; l < o.layers; ++l) shards.push_back(layer_tensors(spec, l));
  CheckpointResult r;
  nlohmann::json map = nlohmann::json::object();
  uint64_t tensor_id = 0;
  for (int i = 0; i < n_shards; ++i) {
    for (const Tensor& t : shards[static_cast<size_t>(i)]) {
      map[t.name] = shard_name(i);
      r.params += t.numel();
    }
    GRIDQ_RETURN_IF_ERROR(
        write_shard(tmp + "/" + shard_name(i), shards[static_cast<size_t>(i)], o.seed, tensor_id, r.bytes));
    std::fprintf(stderr, "\rbench checkpoint: shard %d/%d written", i + 1, n_shards);
  }
  std::fprintf(stderr, "\n");
  nlohmann::json index = {{"metadata", {{"total_parameters", r.params}, {"total_size", r.bytes}}},
                          {"weight_map", map}};
  std::ofstream(tmp + "/model.safetensors.index.json") << index.dump(2) << "\n";
  std::ofstream(tmp + "/config.json") << cfg.dump(2) << "\n";
  for (const std::string& f : tok_files) {
    const fs::path src = fs::path(o.tokenizer_from) / f;
    if (fs::exists(src)) fs::copy_file(src, fs::path(tmp) / f, ec);
    if (ec) return err("bench checkpoint: copying {}: {}", src.string(), ec.message());
  }
  fs::rename(tmp, o.out, ec);
  if (ec) return err("bench checkpoint: rename {} to {}: {}", tmp, o.out, ec.message());
  r.shards = n_shards;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gridq::cuda

// Opening one model on the CPU reference and on the CUDA backend from the same host weights, for the GPU
// engine tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/loader.h"
#include "runtime/artifact_weights.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/engine.h"
#include "runtime/model_weights.h"
#include "text/tokenizer.h"

namespace gridq::cuda::test {

struct Both {
  std::unique_ptr<runtime::Engine> cpu, gpu;
  CudaBackend* cuda = nullptr;  // owned by gpu
};

inline runtime::DeviceOptions test_device_options(int max_seqs = 16, bool graphs = true) {
  runtime::DeviceOptions o;
  o.cuda_graphs = graphs;
  o.gpu_memory_utilization = 0.5;
  o.max_model_len = 4096;
  o.max_num_seqs = max_seqs;
  o.prefix_caching = true;  // ring snapshots reserved (tests that turn caching on use them)
  return o;
}

// The GPU engine alone (no CPU twin), for the invariance tests.
inline Expected<Both> open_both(const std::string& dir, bool with_cpu = true, int max_seqs = 16,
                                bool graphs = true) {
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json cfg,
                         io::read_json_file((std::filesystem::path(dir) / "config.json").string()));
  model::ModelSpec spec;
  runtime::ModelWeights w;
  std::shared_ptr<void> keep;
  if (cfg.contains("quantization_config")) {
    GRIDQ_ASSIGN_OR_RETURN(std::shared_ptr<runtime::ArtifactModel> am, runtime::load_artifact_model(dir));
    spec = am->spec;
    w = am->weights;
    keep = am;
  } else {
    GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel lm, model::load_model(dir));
    GRIDQ_ASSIGN_OR_RETURN(w, runtime::build_model_weights(lm.spec, lm.weights));
    spec = lm.spec;
    keep = std::shared_ptr<void>(std::move(lm.checkpoint));
  }
  Both b;
  GRIDQ_ASSIGN_OR_RETURN(auto gpu, CudaBackend::create(spec, w, test_device_options(max_seqs, graphs)));
  b.cuda = gpu.get();
  runtime::EngineOptions eo;
  b.gpu = runtime::Engine::from_backend(std::move(gpu), eo);
  if (with_cpu) {
    GRIDQ_ASSIGN_OR_RETURN(auto cpu, runtime::cpu::CpuBackend::create(spec, std::move(w), keep));
    b.cpu = runtime::Engine::from_backend(std::move(cpu), eo);
  }
  return b;
}

// n token ids drawn from a seeded generator over [0, vocab).
inline std::vector<int32_t> random_prompt(int seed, int n, int vocab) {
  std::mt19937 r(static_cast<uint32_t>(seed));
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(r() % static_cast<uint32_t>(vocab));
  return p;
}

// The first n tokens of a text file under the model's tokenizer.
inline std::vector<int32_t> text_tokens(const std::string& model_dir, const std::string& file, size_t n) {
  auto tok = text::Tokenizer::from_file((std::filesystem::path(model_dir) / "tokenizer.json").string());
  if (!tok.ok()) return {};
  std::ifstream f(file, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str().substr(0, 64 * n);
  auto ids = tok->encode(s);
  if (ids.size() > n) ids.resize(n);
  return ids;
}

// True when the artifact's q_proj of layer 0 is FP8 W8A8 (the FP8 parity bounds apply).
inline bool artifact_has_fp8_attention(const std::string& dir) {
  auto am = runtime::load_artifact_model(dir);
  return am.ok() && (*am)->weights.layers.at(0).q.format == runtime::WeightFormat::kFP8;
}

}  // namespace gridq::cuda::test

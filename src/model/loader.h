// Architecture dispatch: config.json + tensor table -> ModelSpec + WeightMap. Unknown architectures,
// unknown config values that change the math, and unknown or missing tensors are refused by name.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "io/checkpoint.h"
#include "model/model_spec.h"
#include "model/weight_map.h"

namespace gridq::model {

using TensorTable = std::map<std::string, const io::TensorInfo*, std::less<>>;

struct Adapted {
  ModelSpec spec;
  WeightMap weights;
};

// Dispatches on config["architectures"][0].
Expected<Adapted> adapt(const nlohmann::json& config, const TensorTable& tensors);
Expected<Adapted> adapt_laguna(const nlohmann::json& config, const TensorTable& tensors);
Expected<Adapted> adapt_qwen3_moe(const nlohmann::json& config, const TensorTable& tensors);
// LlamaForCausalLM and Qwen3ForCausalLM (dense; Qwen3 adds q/k norms).
Expected<Adapted> adapt_llama(const nlohmann::json& config, const TensorTable& tensors);

struct LoadedModel {
  std::unique_ptr<io::Checkpoint> checkpoint;  // owns the mmaps the WeightMap points into
  ModelSpec spec;
  WeightMap weights;
};

// Opens an HF checkpoint directory and adapts it.
Expected<LoadedModel> load_model(const std::string& dir);

TensorTable tensor_table(const io::Checkpoint& ckpt);

}  // namespace gridq::model

// Loads a gridbook artifact (or any directory gridbook::Artifact accepts) into a ModelSpec + ModelWeights:
// FP8 W8A8 modules become kFP8 QMatrix views, CB modules kCB views over the mmapped cb_qweight bytes (one
// row decoded at a time, never expanded), passthrough modules BF16/F32 views. The architecture adapter runs
// on the logical shapes, so the same name and layout rules apply as for an HF checkpoint.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/artifact.h"
#include "model/model_spec.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {

struct ArtifactModel {
  std::unique_ptr<gridbook::Artifact> artifact;
  model::ModelSpec spec;
  ModelWeights weights;
  // Owned copies: logical stand-in tensors for the adapter, and 4-byte-aligned weight_scale copies (tensor
  // data in a safetensors file is only byte aligned after U8 tensors).
  std::deque<io::TensorInfo> logical;
  std::deque<std::vector<float>> scales;
  std::deque<std::vector<uint16_t>> aligned_bf16;
};

Expected<std::shared_ptr<ArtifactModel>> load_artifact_model(const std::string& dir);

// Sets the activation contract of every FP4-grid CB matrix of `w`: "w4a4" act_bits 4 (FP4 group-16 QDQ, the
// format's contract), "w4a16" act_bits 16 (no QDQ), "" leaves them as loaded. Returns how many matrices it
// applies to; an unknown contract is an error naming it.
Expected<int64_t> set_activation_contract(ModelWeights& w, const std::string& contract);

}  // namespace gridq::runtime

// `gridq bench checkpoint`: a synthetic BF16 Hugging Face checkpoint of a known Laguna config's real shapes
// (synthetic_model.h), cut to its first few layers, written to disk in the HF shard layout (one shard for
// embed_tokens / norm / lm_head, one per decoder layer, model.safetensors.index.json, config.json, the
// tokenizer files of another model) so the whole quantizer pipeline can run on it at full size.
//
// Values (the realistic scale of a trained checkpoint's BF16 weights, hopper.md §11.2's never-zeros rule):
// every matrix uniform in ±0.035 (σ ≈ 0.02, HF's initializer_range), embeddings ±0.05, norms in [0.9, 1.1],
// q/k norms the same, the router's e_score_correction_bias (F32, as Laguna-S-2.1 stores it) in ±0.01. Each
// value is a hash of (seed, tensor, index): the bytes depend on the seed only, not on threads.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace gridq::cuda {

struct CheckpointOptions {
  std::string shape = "laguna-s-2.1";
  int layers = 3;  // layer 0 dense, the rest MoE (laguna.md §2)
  uint64_t seed = 1;
  std::string tokenizer_from = "models/laguna-tiny-code";  // tokenizer.json, tokenizer_config.json, ...
  std::string out;                                         // must not exist
};

struct CheckpointResult {
  int64_t params = 0, bytes = 0;
  int shards = 0;
  double seconds = 0.0;
};

Expected<CheckpointResult> write_synthetic_checkpoint(const CheckpointOptions& o);

}  // namespace gridq::cuda

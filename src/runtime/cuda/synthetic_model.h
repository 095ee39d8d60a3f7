// Full-size synthetic models for `gridq bench decode --synthetic NAME` (laguna.md §2, §3): the ModelSpec of a
// known Laguna config, and a DeviceModel of the seed recipe (routed experts NVFP4-CB K16 v2, attention
// q/k/v/o FP8 W8A8, everything else BF16) built directly in GPU memory from random but legal bytes, in
// exactly the layout upload_model produces (device_model.h). Nothing touches the disk; the bytes depend on
// the seed only.
//
// Value ranges (hopper.md §11.2: never time zeros): BF16 weights uniform in ±0.05 (embeddings, router,
// shared/dense MLP, g_proj, lm_head), FP8 E4M3 bytes uniform without NaN with row scales in [1e-3, 1e-2], CB
// tiles with uniform index bytes and legal v2 (E, c) pairs (fill_random_cb_tiles), on-grid random E2M1
// codebooks, norms uniform in [0.9, 1.1], router bias uniform in ±0.01 (routing stays realistic: the router
// input is normalised, the logits spread over ~±3, the top-k sets vary token to token).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/cuda/device_model.h"

namespace gridq::cuda {

// The names --synthetic accepts: "laguna-s-2.1", "laguna-xs-2.1", "laguna-tiny-code" (the bundled model's
// shape, shared/models/laguna-tiny-code).
const std::vector<std::string>& synthetic_model_names();

// The spec of a known Laguna config, field for field what model/laguna.cpp makes of its config.json
// (XS-2.1: beta_fast 32, beta_slow 1; laguna.md §2 notes published copies differ).
Expected<model::ModelSpec> synthetic_spec(const std::string& name);

// splitmix64's finalizer: the synthetic weights' seeds and values (a pure function of x).
uint64_t synthetic_hash(uint64_t x);

// The Hugging Face config.json of that config cut to its first `layers` layers (what model/laguna.cpp reads
// back as synthetic_spec(name) with n_layers = layers): `gridq bench checkpoint` writes it.
Expected<nlohmann::json> synthetic_hf_config(const std::string& name, int layers);

// DeviceModel::packed_bytes of synthetic_device_model(spec): the recipe's matrix bytes as the host would hold
// them (CB 73 B per 256 weights, FP8 1 B/weight + a 4-byte row scale, BF16 2 B/weight), counted like
// upload_model counts them (matrices and FP8 scales; norms, bias and codebooks not included).
size_t synthetic_packed_bytes(const model::ModelSpec& spec);

// Every weight of `spec` (a Laguna-shaped spec: head_dim, H and I multiples of 256 where CB needs it) random
// and legal on the device. Deterministic in `seed`. Allocates with DeviceBuffer::alloc; returns after the
// device work is finished.
Expected<std::unique_ptr<DeviceModel>> synthetic_device_model(const model::ModelSpec& spec, uint64_t seed);

}  // namespace gridq::cuda

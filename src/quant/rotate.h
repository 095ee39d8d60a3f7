// Incoherence processing without a format change (issue 15 item 3): the residual stream of a BF16 checkpoint
// is rotated by a fixed orthogonal matrix Q = H·diag(s)/√n (H a Hadamard matrix of order n = hidden size,
// s = ±1 signs from a fixed seed), folded into the weights so that the model computes the same function:
//
//   embedding rows           E' = E·Q                          (x' = x·Q enters the first layer)
//   residual readers         W' = (W ⊙ w_norm[cols])·Q, w_norm := 1
//                            q/k/v/g (input_layernorm), router, dense / shared / routed gate+up
//                            (post_attention_layernorm), lm_head (model.norm)
//   residual writers         W' = Qᵀ·W                         o_proj, dense / shared / routed down_proj
//
// RMSNorm commutes with an orthogonal Q (‖x·Q‖ = ‖x‖) only with an all-ones weight, which is why each norm's
// weight is folded into the matrices that read it first. q/k norms act per head after the projection and the
// router bias on router outputs: untouched. The result is an ordinary BF16 checkpoint (same names, shapes,
// dtypes, shards; norms stored as ones), so the quantizer and every reader take it as is.
//
// Supported sizes: n = m·2^k with m = 1 (Sylvester) or m = q+1 for a prime q ≡ 3 (mod 4) (Paley I), e.g.
// 512 = 2^9, 2048 = 2^11, 3072 = 12·256, 5120 = 20·256; H = H_m ⊗ H_{2^k}. Other sizes are refused.
//
//   auto r = make_hadamard_rotation(3072, kDefaultRotationSeed);   // r->apply(v) computes v·Q in place
//   auto s = rotate_checkpoint("models/laguna-tiny-code", "/tmp/rot", {});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace gridq::quant {

inline constexpr uint64_t kDefaultRotationSeed = 0x6772696471524f54ull;  // "gridqROT"

struct Rotation {
  int n = 0;                 // order
  int m = 1;                 // the Paley (or trivial) factor
  int p2 = 1;                // the Sylvester factor 2^k; n = m·p2
  std::vector<int8_t> hm;    // [m, m] ±1 entries of H_m (row-major)
  std::vector<double> sign;  // [n] ±1
  uint64_t seed = 0;

  // v[n] ← v·Q (row vector times Q). The same call gives Qᵀ·c for a column c, since (Qᵀc)ᵀ = cᵀ·Q.
  void apply(double* v) const;
  // v[n] ← v·Qᵀ (the inverse of apply).
  void apply_inverse(double* v) const;
  // A short human name: "hadamard 12x256 seed 0x..." .
  std::string describe() const;
};

// The randomized Hadamard rotation of order n, or an error naming n and the supported sizes.
Expected<Rotation> make_hadamard_rotation(int n, uint64_t seed);

struct RotateOptions {
  uint64_t seed = kDefaultRotationSeed;
  int threads = 0;  // 0 = OpenMP default; the bytes do not depend on it
};

struct RotateSummary {
  std::string construction;  // Rotation::describe()
  int64_t input_side = 0;    // matrices rotated on their inputs (W·Q)
  int64_t output_side = 0;   // matrices rotated on their outputs (Qᵀ·W)
  int64_t norms = 0;         // RMSNorm weights folded and set to ones
  int64_t copied = 0;        // tensors copied unchanged
};

// Writes the rotated checkpoint of `src` (a BF16 Hugging Face checkpoint) into the new directory `dst`: every
// safetensors shard under its own name, every other file (config, index, tokenizer, templates) copied as is.
// Refuses tied embeddings, a tensor no weight role accounts for, and quantized sources.
Expected<RotateSummary> rotate_checkpoint(const std::string& src, const std::string& dst,
                                          const RotateOptions& o);

}  // namespace gridq::quant

// S5 for one Linear (quantizer.md §2, §5, §6): one source weight + the statistics of its input + the rule's
// format and encoder → the bytes the artifact stores, the dequantized weight Ŵ the encoder meant, and the
// per-Linear record that goes into the artifact's provenance (n, cold, holdout output-MSE of the chosen
// encoding against nearest-neighbour only, the gate outcome, ½·tr(ΔW H ΔWᵀ)).
//
//   EncodeParams p{"NVFP4_CB_K16", "cb_gptq"};
//   auto cb = lattice_codebook(*rule_rung(...));
//   auto enc = encode_tensor(src, &stats, p, &*cb);   // enc->data = cb_qweight rows, enc->w_hat = Ŵ
//
// Formats: BF16 (the source bytes unchanged, whatever their dtype), FP8_DYNAMIC (E4M3 [R, C] + fp32 per-row
// scale), NVFP4_CB_K{12..24} two-tier v2 and FP8_CB_K{28..48} (packed superblocks [R, C/256·type_size];
// FP8-CB adds the per-row scale). Pure: the result depends only on the inputs (not on thread count).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/rung.h"
#include "io/safetensors.h"
#include "quant/capture.h"
#include "quant/cb_gptq.h"
#include "quant/recipe.h"

namespace gridq::quant {

struct EncodeParams {
  std::string format = "BF16";      // rule format (see recipe.h)
  std::string encoder = "cb_gptq";  // "cb_gptq" or "rtn"; ignored for BF16
  CbGptqParams cb_gptq;
  TwoTierParams two_tier;
  // `--device cuda`: NVFP4-CB K12-K24 CB-GPTQ, its refinement and RTN run on the GPU (the same bytes;
  // cb_gptq_device.h), and so does every output proxy (the same bits). The routed experts go through the
  // device batch (pipeline.h encode_experts_on_device), which also takes their holdout MSEs, except under
  // act order (one device call a matrix, its permutation and refinement on the host); FP8_DYNAMIC and FP8-CB
  // GPTQ with block 256 run on the GPU too; the other rungs stay on the CPU.
  bool device_encode = false;
  // Routed experts per device batch (their gate/up, then down matrices in one call each): 32 Laguna-S-2.1
  // experts take ≈ 15 GB of device memory with the holdout buffers (bench quantize: 10.2 GB without them).
  int device_batch_experts = 32;
};

// The CB encoders' options of a rule (its damping, GPTQ block and two-tier search).
CbGptqOptions gptq_options(const EncodeParams& p);

// A source tensor as stored: 2-D [R, C] for anything but BF16 (copy). BF16, F16 or F32 elements.
struct SourceWeight {
  std::string name;  // source tensor name, e.g. "model.layers.1.mlp.experts.3.up_proj.weight"
  io::DType dtype = io::DType::BF16;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;  // [R, C] row-major
};

// Per-Linear record (quantizer.md §9 "Progress reporting"; written into provenance.linear_stats).
struct LinearStats {
  std::string tensor;   // source tensor name
  std::string format;   // chosen format
  std::string encoder;  // "cb_gptq", "rtn" or "copy"
  std::string input;    // InputStats::name, empty for BF16 copies
  int64_t n = 0;        // rows that entered H
  int64_t n_hold = 0;   // holdout rows used for the MSE numbers
  bool cold = false;    // n == 0: CB-GPTQ degenerates to plain nearest (U = I)
  double damp = 0.0;    // relative damping that factorized (CB-GPTQ / FP8 GPTQ)
  // Holdout output-MSE (mean over n_hold·R of ((Ŵ − W)·x)²) of the GPTQ encoding and of the NN-only (RTN)
  // encoding; absent when not computed (no holdout rows, BF16, or RTN without a gate).
  std::optional<double> mse_gptq, mse_nn;
  // "kept_gptq", "kept_nn" (the holdout gate fell back), "ungated" (cb_gptq with the gate off or no
  // holdout rows), "rtn", "copy".
  std::string gate;
  double half_trace = 0.0;         // ½·tr(ΔW H ΔWᵀ) of the chosen encoding (0 for BF16); D = this / T
  std::optional<double> identity;  // S4 value of this Linear's input (δ or relative recompute error)
  std::string identity_kind;       // "rmsnorm" / "recompute" when identity is set
  // CB-GPTQ refinement (refine_passes > 0, NVFP4-CB): H-weighted error before/after, accepted changes, the
  // holdout output-MSE of both and whether the refined encoding was kept; null when it did not run.
  nlohmann::json refine;
  nlohmann::json to_json() const;
};

struct EncodedTensor {
  std::string format;                  // "BF16", "FP8_DYNAMIC" or a rung name
  std::optional<gridbook::Rung> rung;  // CB only
  int64_t rows = 0, cols = 0;          // 2-D formats; BF16 copies keep `shape` of the source
  std::vector<int64_t> shape;          // BF16: the source shape; else [rows, cols]
  io::DType dtype = io::DType::BF16;   // dtype of `data` as stored (source dtype, F8_E4M3 or U8)
  std::vector<uint8_t> data;           // BF16: source bytes; FP8: E4M3 [R, C]; CB: packed [R, C/256·ts]
  std::vector<float> scale;            // FP8_DYNAMIC and FP8-CB: [R] per-row scale, else empty
  std::vector<float> w_hat;            // non-BF16: [R, C] the dequantized weight the encoder meant
  LinearStats stats;
  // Encoded from a device batch's candidates (encode_tensor's `pre`): which one was kept
  // (runtime::DeviceCbBatch::Which). stats.half_trace is then the caller's to fill, from that batch.
  int device_candidate = -1;
};

struct DeviceFp4Candidates;  // cb_gptq_device.h

// The source values as fp32 [R, C] (BF16/F16 widen exactly). Refuses other dtypes and size mismatches.
Expected<std::vector<float>> source_to_f32(const SourceWeight& w);

// Encodes one Linear. `in` must be non-null for every format but BF16 (its H/imatrix/holdout drive the
// encoder; n == 0 means a cold input: plain nearest). `cb` is the codebook of a CB format (else ignored).
// `W32`, when given, is source_to_f32(w) computed by the caller (saves a conversion in budget mode).
// `pre`, when given (an NVFP4-CB rule with the device batch's candidates for this matrix, cb_gptq_device.h),
// replaces the encoders and their holdout MSEs: the same choices are made among the same encodings.
Expected<EncodedTensor> encode_tensor(const SourceWeight& w, const InputStats* in, const EncodeParams& p,
                                      const gridbook::Codebook* cb, const std::vector<float>* W32 = nullptr,
                                      const DeviceFp4Candidates* pre = nullptr);

// SHA-256 (hex) of Ŵ as BF16 bits (little-endian u16, row-major): what S7 compares against a decode of the
// stored bytes. Ŵ of CB formats is exactly representable in BF16 (format.md §7, §16).
std::string w_hat_bf16_sha256(std::span<const float> w_hat);

}  // namespace gridq::quant

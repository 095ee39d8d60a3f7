// The NVFP4-CB encoders on the GPU (`gridq quantize --device cuda`, runtime::CudaBackendHooks::cb_fp4):
// CB-GPTQ when H is not null, else RTN, with the same bytes as cb_gptq.h encode_fp4_cb_gptq /
// encode_fp4_rtn. Fails when this program has no CUDA backend or the rung is one the device encoder does
// not cover (device_encodes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "quant/capture.h"
#include "quant/cb_gptq.h"
#include "quant/cb_refine.h"
#include "runtime/device.h"

namespace gridq::quant {

// Whether the device encoder covers `rung`: NVFP4-CB v2 products of two equal sub-tables of 64 to 4096
// entries (K12, K16, K20, K24); the others are encoded on the CPU (the same bytes).
bool device_encodes(const gridbook::Rung& rung);

// With refine_passes > 0 (CB-GPTQ only) the device also runs cb_refine.h's refinement of the encoding
// (scales pass when refine_scales; the damping CB-GPTQ used) and, unless CB-GPTQ ran with U = I, returns
// the refined encoding and refine_fp4's result here.
struct DeviceRefined {
  bool ran = false;
  Fp4CbEncoding enc;
  RefineResult result;
};

// A chunk of a layer's routed experts encoded at once on the GPU (runtime::CudaBackendHooks::cb_fp4_batch):
// matrix m is W[m] [R, C] with input in[h_of[m]] (its H, n, imatrix and holdout rows). Each matrix gets the
// candidates asked for, every one carrying its holdout output-MSE (Fp4CbEncoding::holdout_mse, when its
// input has holdout rows) and its place in the batch (Fp4CbEncoding::candidate); encode_tensor (with
// `pre`) chooses among them as it would among its own, and `dev->half_traces` gives the output proxy of the
// chosen ones. The bytes are encode_fp4_on_device's.
struct DeviceFp4Candidates {
  std::optional<Fp4CbEncoding> gptq, rtn;
  DeviceRefined refined;  // gptq's refinement (refine_passes > 0 and not the identity)
};
struct DeviceFp4Batch {
  std::vector<DeviceFp4Candidates> m;           // [M]
  std::unique_ptr<runtime::DeviceCbBatch> dev;  // the batch on the device (its output proxies)
};
Expected<DeviceFp4Batch> encode_fp4_batch_on_device(const gridbook::Codebook& cb, int R, int C,
                                                    const std::vector<const float*>& W,
                                                    const std::vector<int>& h_of,
                                                    const std::vector<const InputStats*>& in,
                                                    const CbGptqOptions& opt, int refine_passes,
                                                    bool refine_scales, bool gptq, bool rtn);

// Fills codes and w_hat of a device batch's candidate from its sub-indices (which it then drops); a no-op on
// an encoding that already has them.
void decode_candidate(const gridbook::Codebook& cb, Fp4CbEncoding& enc);

Expected<Fp4CbEncoding> encode_fp4_on_device(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt, int refine_passes = 0,
                                             bool refine_scales = false, DeviceRefined* refined = nullptr);

}  // namespace gridq::quant

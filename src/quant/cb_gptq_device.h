// The NVFP4-CB encoders on the GPU (`gridq quantize --device cuda`, runtime::CudaBackendHooks::cb_fp4):
// CB-GPTQ when H is not null, else RTN, with the same bytes as cb_gptq.h encode_fp4_cb_gptq /
// encode_fp4_rtn. Fails when this program has no CUDA backend or the rung is one the device encoder does
// not cover (sub-tables of 64 or 256 entries: K12, K16).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gridbook/codec.h"
#include "quant/cb_gptq.h"
#include "quant/cb_refine.h"

namespace gridq::quant {

// With refine_passes > 0 (CB-GPTQ only) the device also runs cb_refine.h's refinement of the encoding
// (scales pass when refine_scales; the damping CB-GPTQ used) and, unless CB-GPTQ ran with U = I, returns
// the refined encoding and refine_fp4's result here.
struct DeviceRefined {
  bool ran = false;
  Fp4CbEncoding enc;
  RefineResult result;
};

Expected<Fp4CbEncoding> encode_fp4_on_device(const gridbook::Codebook& cb, const float* W, int R, int C,
                                             const float* H, int64_t n_tokens, const float* q,
                                             const CbGptqOptions& opt, int refine_passes = 0,
                                             bool refine_scales = false, DeviceRefined* refined = nullptr);

}  // namespace gridq::quant

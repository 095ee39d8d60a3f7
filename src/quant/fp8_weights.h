// FP8 W8A8 dynamic weights (quantizer.md §6, compressed-tensors FP8_DYNAMIC preset): one fp32 scale per
// output channel s_r = amax_r / 448 (an all-zero row uses s_r = 1) and q = e4m3_rne_sat(w / s_r), stored as
// `weight` E4M3 [R, C] plus `weight_scale` fp32 [R, 1]. The dequantized weight is e4m3(q) · s_r.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace gridq::quant {

struct Fp8Weights {
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> q;    // [rows, cols] E4M3 bytes
  std::vector<float> scale;  // [rows] (written as [rows, 1])
};

// Round to nearest (RNE on fl32(w / s_r), saturating at ±448). W: [R, C] fp32, finite.
Expected<Fp8Weights> quantize_fp8_per_channel(const float* W, int R, int C);

// Optional GPTQ for FP8_DYNAMIC (§6): CB-GPTQ with step 1 and the 253-value E4M3 grid as a scalar table, the
// same per-channel scales (fixed from the original W), H [C, C] fp32 with n_tokens rows (0: plain nearest,
// i.e. the nearest E4M3 value with ties to the lower value instead of RNE).
Expected<Fp8Weights> quantize_fp8_per_channel_gptq(const float* W, int R, int C, const float* H,
                                                   int64_t n_tokens, double damp = 0.1, int block = 256);

// The same on the GPU (runtime::CudaBackendHooks::fp8_gptq), the same bytes: for block 256 and C a multiple
// of 256 (fp8_gptq_on_device_covers); fails without the CUDA backend.
bool fp8_gptq_on_device_covers(int C, int block);
Expected<Fp8Weights> quantize_fp8_per_channel_gptq_on_device(const float* W, int R, int C, const float* H,
                                                             int64_t n_tokens, double damp = 0.1);

// e4m3(q) · s_r as fp32, [R, C].
std::vector<float> dequantize_fp8(const Fp8Weights& w);

}  // namespace gridq::quant

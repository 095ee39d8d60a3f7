// Activation contracts of format.md §14: the exact quantize-dequantize (QDQ) a layer applies to its BF16
// input row before the GEMM. These are the CPU reference; CUDA kernels are tested bit-exact against them.
//
// Inputs are BF16 rows (the contract is defined on BF16). The CPU engine holds activations in FP32; the
// *_f32 variants first round each element to BF16 (bf16_rn) and then apply the same contract, returning the
// BF16 results widened to FP32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace gridq {

// FP4 contract (§14.1) on exactly one group of 16 BF16 values: in[16] -> out[16]. A NaN anywhere in the
// group makes the whole group NaN (0x7FC0). Output zeros are +0.
void qdq_fp4_group16(const uint16_t* in_bf16, uint16_t* out_bf16);

// The whole row, group by group. Refuses in.size() % 16 != 0 or out.size() != in.size(). in == out allowed.
Status qdq_fp4_row(std::span<const uint16_t> in, std::span<uint16_t> out);
Status qdq_fp4_row_f32(std::span<const float> in, std::span<float> out);

// FP8 per-token contract (§14.2), QDQ form: out = bf16_rn(fl32(e4m3(q) · s)). Refuses out.size() !=
// in.size(). A NaN in the row makes the whole row NaN (the absmax, hence s, is NaN). Signs of zero are kept.
Status qdq_fp8_token_row(std::span<const uint16_t> in, std::span<uint16_t> out);
Status qdq_fp8_token_row_f32(std::span<const float> in, std::span<float> out);

// The same contract in (codes, scale) form for W8A8 kernels that apply s in the epilogue:
// q_out[k] = e4m3_rne(clamp(fl32(x_k / s), -448, 448)), returns s. Precondition: q_out.size() >= in.size().
float quantize_fp8_token_row(std::span<const uint16_t> in, std::span<uint8_t> q_out);
float quantize_fp8_token_row_f32(std::span<const float> in, std::span<uint8_t> q_out);

// The per-token scale from a row absmax a: max(fl32(a · fl32(1/448)), fl32(1/229376)).
float fp8_token_scale(float absmax);

}  // namespace gridq

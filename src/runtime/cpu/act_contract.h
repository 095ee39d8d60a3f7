// The activation contracts of format.md §14 for the CPU forward's matmuls: bit-identical to the reference
// in core/act_qdq.h (the tests compare them on random and edge-case rows), but vectorised. At decode they
// ran per matrix per token and cost more than the products of a quantized artifact (E4M3 and FP4 rounding
// one element at a time in integer code); a row with a NaN takes the reference functions.
#pragma once

#include <cstdint>

namespace gridq::runtime::cpu {

// FP8 per-token (W8A8 form): q[c] = e4m3(x[c] / s) as fp32, returns s (quantize_fp8_token_row_f32 with
// the codes widened). x[n], q[n].
float fp8_token_values(const float* x, int64_t n, float* q);
// FP8 per-token QDQ: out = bf16_rn(e4m3(x / s) · s) (qdq_fp8_token_row_f32). n % 8 == 0 not needed.
void qdq_fp8_row(const float* x, int64_t n, float* out);
// FP4 group-16 QDQ (qdq_fp4_row_f32). Precondition: n % 16 == 0.
void qdq_fp4_row(const float* x, int64_t n, float* out);

}  // namespace gridq::runtime::cpu

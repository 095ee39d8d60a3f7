// The CPU's fast path for BF16 and FP8 weights (`--cpu-kernels bf16`, CpuKernels::kBf16): a product's
// activations are rounded to BF16 once (round to nearest even, VCVTNEPS2BF16), then every dot product runs on
// AVX512-BF16's VDPBF16PS, which multiplies pairs of BF16 values and adds them to fp32 lanes: twice the
// multiply-adds per instruction of an fp32 FMA, and 16 columns per 32-byte weight load instead of 8.
//
// It is a different numeric path from the reference (dot_kernels.h): the activations lose their low 16
// bits and the instruction rounds inside a pair as the CPU implements it. So the reference stays the
// oracle (HF parity, the quantizer's teacher, `logits` and `eval` by default) and this one serves.
// The "fast order", fixed by the matrix alone: 16 fp32 lanes, lane j taking columns 32s + 2j and
// 32s + 2j + 1 of step s = 0, 1, ... in ascending s (columns past the end are zeros), then the reference
// tree lane[j] += lane[j + s] for s = 8, 4, 2, 1. Every token of every call sums in that order whatever
// shares the call (tokens in tiles of 1-4, rows in blocks of 4), so batch and thread invariance hold here
// as on the reference path.
#pragma once

#include <cstdint>

namespace gridq::runtime::cpu {

// Whether this CPU (and OS) runs AVX512-BF16 (with AVX512F/BW/VL). Fixed at start-up.
bool have_avx512_bf16();
// Whether it also has AVX512-VBMI (byte permutes; not every AVX512-BF16 CPU does: Cooper Lake lacks it),
// which the E4M3 and K16 v2 decoders of this path use where present. Fixed at start-up.
bool have_avx512_vbmi();

// xb[i] = bf16_rne(x[i]) for i < n, as VCVTNEPS2BF16 rounds (NaN kept quiet). Needs have_avx512_bf16().
void round_to_bf16(const float* x, int64_t n, uint16_t* xb);

// y[t·ldy + i] = Σ_c w[i·C + c]·xb[t·C + c] in the fast order, for rows i < nr (1 ≤ nr ≤ 4) and tokens
// t < T. Weight rows are read in place: one after another for T < 4 (decode), as a 4-row × 4-token
// register tile otherwise. Needs have_avx512_bf16().
void bf16_dot_rows(const uint16_t* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
                   int64_t ldy);
// The same with E4M3 rows (FP8 W8A8: xb holds the FP8 activations, exact in BF16), each code taken as the
// BF16 of its value (exact); a row holding a NaN code (0x7F/0xFF) gives NaN.
void bf16_dot_rows_e4m3(const uint8_t* w, int64_t C, int nr, const uint16_t* xb, int64_t T, float* y,
                        int64_t ldy);

// hg[i] = silu(hg[i])·hu[i] for i < n with a vectorised exp (a degree-6 polynomial after range reduction,
// within 2 ulp of std::exp over the range it is used on), for layers on the fast path, whose products
// round this input to BF16 anyway. The reference keeps glibc's expf.
void silu_mul_fast(float* hg, const float* hu, int64_t n);

// s[j] = exp(s[j] - max) / Σ exp(s[k] - max) for j < n, the fast path's attention softmax: the same
// vectorised exp, the sum over 16 lanes in ascending j then the lanes' tree, a multiply by its reciprocal.
// Fixed by n alone, so a query row's weights never depend on the batch.
void softmax_fast(float* s, int64_t n);

// Σ v[i]² in float64 for rmsnorm_rows (layer_ops.h) on the fast path: eight lanes (lane j: i ≡ j mod 8,
// ascending) and a fixed tree instead of the reference's one chain (norm_fast.cpp).
double sum_squares_fast(const float* v, int64_t n);

}  // namespace gridq::runtime::cpu

// The output-MSE proxy of bit allocation (quantizer.md §7): D(u, f) = ½·tr(ΔW H ΔWᵀ)/T with ΔW = Ŵ_f − W
// rendered by the real encoder, H = XᵀX of the Linear's input and T the total calibration token count, so
// each routed expert counts in proportion to its traffic. A unit's D is the sum over its matrices (each with
// its own H): sum output_half_trace over them, then divide once by T (or call output_proxy per matrix and
// add; the results agree up to the order of the final additions).
//
// Float64 throughout with a fixed order: each row's ½·Δ_r H Δ_rᵀ is computed on its own (OpenMP over rows),
// and the rows are added in row order, so the value does not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace gridq::quant {

// ½·Σ_r Δ_r H Δ_rᵀ, Δ = W_hat − W. W, W_hat: [R, C]; H: [C, C] fp32 (used as given, not symmetrised).
// Refuses non-finite inputs and empty shapes, naming `what`.
Expected<double> output_half_trace(const float* W, const float* W_hat, int R, int C, const float* H,
                                   const char* what = "output proxy");

// output_half_trace's input rules (non-empty shape, finite W, W_hat and H), naming `what`.
Status check_half_trace_inputs(const float* W, const float* W_hat, int R, int C, const float* H,
                               const char* what);

// output_half_trace on the GPU when `device` (runtime::CudaBackendHooks::half_trace: the same bits), else
// on the CPU. Fails when `device` and this program has no CUDA backend.
Expected<double> output_half_trace_on(bool device, const float* W, const float* W_hat, int R, int C,
                                      const float* H, const char* what);

// D = output_half_trace / T. T: the total calibration tokens (> 0).
Expected<double> output_proxy(const float* W, const float* W_hat, int R, int C, const float* H, int64_t T,
                              const char* what = "output proxy");

}  // namespace gridq::quant

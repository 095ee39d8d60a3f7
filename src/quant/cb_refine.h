// Refinement of an NVFP4-CB v2 encoding after CB-GPTQ (issue 15 item 2): coordinate descent in the H metric
// with the format unchanged. A literal second GPTQ pass with the chosen scales fixed reproduces the first
// bit for bit (the lazy scales were already the ones the first pass fed back through), so what can still
// lower the error is a pass that sees every other column's *final* error: for row r with error e = w − ŵ and
// objective f = e·H·eᵀ (H damped like GPTQ's: H + damp·mean(diag H)·I), each step changes one unit and keeps
// the change only if f strictly drops, so f never increases:
//   codes pass  (scales fixed): each sub-vector slab S (4 columns) takes the entry k of its sub-table that
//               minimises f with the other slabs fixed: Δ(x) = δ·H_SS·δᵀ − 2·δ·(H e)_S, δ = x − ŵ_S;
//   scales pass (codes fixed):  each 16-column group takes the legal code c of its superblock's E that
//               minimises f with its codewords fixed (every legal c is scored exactly, which contains the
//               H-metric least-squares scale s* = s + t·(H e)_G / (t·H_GG·tᵀ) projected onto the grid).
// Candidates are ranked with x = t·s and the winner is re-scored with the decoded x = bf16_rn(fl32(t·s))
// before it is accepted, so every accepted step lowers f as the decoder sees it. Float64, rows independent
// (OpenMP over rows, fixed loop orders): bytes do not depend on the thread count.
#pragma once

#include <cstdint>

#include "gridbook/codec.h"
#include "quant/cb_gptq.h"

namespace gridq::quant {

struct RefineOptions {
  int passes =
      1;  // rounds; each is a codes pass, then (scales) a scales pass; stops when one changes nothing
  bool scales = false;  // run the scales pass in each round
  double damp = 0.1;    // relative damping of the objective's H (GPTQ's own by default)
};

struct RefineResult {
  double f_before = 0.0;  // Σ_r e·H_damped·eᵀ before and after (float64, rows summed in order)
  double f_after = 0.0;
  int rounds = 0;              // rounds that ran (the last may have changed nothing)
  int64_t codes_changed = 0;   // accepted slab changes
  int64_t scales_changed = 0;  // accepted group-code changes
};

// Refines enc (codes, planes, w_hat) in place. W: [R, C] the source weights the encoding approximates; H: [C,
// C] fp32 (any positive multiple of XᵀX). A zero H (cold input) leaves enc unchanged.
Expected<RefineResult> refine_fp4(const gridbook::Codebook& cb, const float* W, const float* H, int R, int C,
                                  const RefineOptions& opt, Fp4CbEncoding& enc);

// f = Σ_r (w_r − ŵ_r)·(H + λI)·(w_r − ŵ_r)ᵀ with λ = damp·mean(diag H): the objective refine_fp4 lowers.
double h_weighted_error(const float* W, const float* W_hat, const float* H, int R, int C, double damp);

}  // namespace gridq::quant

// Bit allocation (quantizer.md §7): choose one format per unit to meet a global bits-per-weight budget,
// minimising the summed output-MSE proxy D(u, f) = ½·tr(ΔW H ΔWᵀ)/T. A unit is one dense Linear, one
// fused sibling group (q/k/v; gate/up) or the whole routed stack of one layer; units are atomic, so fused
// siblings share one choice by construction.
//
// Solver: multi-choice knapsack. Every unit starts at its cheapest option; a DP over extra bits maximises the
// total cost reduction within the budget. The bins are exact (the gcd of the extra-bit counts) when every
// option's bits are integers and the table stays small, else 0.001 bpw of the model with extras rounded up,
// so a plan never exceeds the budget. Deterministic: among optimal plans the one with the fewest (binned)
// bits wins, then the option listed first at the lowest unit index (lexicographically smallest choice).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gridq::quant {

struct AllocOption {
  std::string format;  // e.g. "NVFP4_CB_K16", "FP8_DYNAMIC", "BF16"
  double bits = 0.0;   // exact serialized bits of the whole unit with this format (books charged once)
  double cost = 0.0;   // D(u, f), ≥ 0
};

struct AllocUnit {
  std::string name;                  // e.g. "layers.2.experts" or "layers.0.attn.qkv"
  int64_t params = 0;                // weights in the unit
  std::vector<AllocOption> options;  // at least one
};

struct AllocPlan {
  std::vector<int> choice;  // [units] index into options
  double bits = 0.0;        // Σ chosen bits
  double bpw = 0.0;         // bits / Σ params (over the units given)
  double cost = 0.0;        // Σ chosen cost
};

// Exact serialized bits of one [R, C] weight in `format` (quantizer.md §7, format.md §4): BF16 16·R·C (a
// BF16 source copied), FP8_DYNAMIC 8·R·C + 32·R (E4M3 weight + fp32 row scale), NVFP4_CB_K{k}
// R·(C/256)·type_size·8 (type_size 4k+9 for layout 2, 4k+16 for layout 1), FP8_CB_K{k} R·(C/256)·4k·8 +
// 32·R. Codebook tables are not included (charge them once per book). Refuses C % 256 != 0 for CB rungs.
Expected<double> matrix_bits(const std::string& format, int64_t R, int64_t C, int layout_version = 2);

// Fails (naming the budget and the minimum/maximum reachable bpw) when even the cheapest choice of every
// unit exceeds `budget_bpw`, or when a unit has no options or non-finite numbers.
Expected<AllocPlan> allocate(const std::vector<AllocUnit>& units, double budget_bpw);

// ---------------------------------------------------------------------------------------------------------
// Measured allocation (`--budget-score measured`, the default). The proxy D can rank rungs badly (it chose a
// plan worse than uniform K16 at the same bits), so the plan is decided by the model's measured output KL:
//
//   1. sensitivity: s[u][o] = KL of the model with unit u alone at option o (every other unit BF16), on a
//      calibration split; the knapsack above runs on s instead of D (KL is additive to first order);
//   2. candidates: every uniform plan that fits (one format for every unit), the measured-knapsack plan and
//      the proxy-knapsack plan, in that order, duplicates dropped;
//   3. check: each candidate's KL measured on the held-out calibration split; the lowest wins, ties to the
//      earlier candidate, so a mixed plan is taken only when it measures strictly better than every
//      uniform plan that fits.
// Uniform plans are always in the search space, so the result never measures worse than the best uniform
// rung that fits the budget (on the check split).

struct PlanCandidate {
  std::string label;  // "uniform NVFP4_CB_K16", "measured", "proxy"
  AllocPlan plan;
  double check_kl = 0.0;  // measured KL on the check split
};

// The uniform plans that fit: for each format listed by every unit, the plan giving every unit that format,
// when its bits fit `budget_bpw` (the knapsack's slack). In the first unit's option order.
std::vector<PlanCandidate> uniform_plans(const std::vector<AllocUnit>& units, double budget_bpw);

struct MeasuredAllocation {
  std::vector<PlanCandidate> candidates;  // in the order above, each with its check_kl
  size_t chosen = 0;                      // index into candidates
  const AllocPlan& plan() const { return candidates[chosen].plan; }
};

// `units` carry the proxy costs; sens[u][o] the measured sensitivities (finite, >= 0, shaped like the
// options); check_kl(choice) measures one plan on the check split. Fails on malformed input, on a failing
// measurement, or when no plan fits.
Expected<MeasuredAllocation> allocate_measured(
    const std::vector<AllocUnit>& units, const std::vector<std::vector<double>>& sens, double budget_bpw,
    const std::function<Expected<double>(const std::vector<int>& choice)>& check_kl);

}  // namespace gridq::quant

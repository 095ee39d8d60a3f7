// The modules a checkpoint of a known architecture must contain and their logical shapes, derived from
// config.json alone (laguna.md §2, §4). The artifact reader checks every tensor against this list (shapes of
// cb_qweight depend on rows/in), and `gridq inspect` counts logical parameters with it. Data-driven: one row
// per module kind, evaluated per layer.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/components.h"

namespace gridq::gridbook {

struct ModuleSpec {
  std::string name;  // canonical module name ("model.layers.1.self_attn.q_proj", "lm_head")
  Component component;
  bool linear = false;  // a Linear that config groups / ignore must claim
  bool bare = false;    // stored without a ".weight" suffix (fused experts, the router bias)
  // Logical weight shape: [rows, in] for a Linear, [E, rows, in] for a stacked expert Linear, [n] for norms.
  std::vector<int64_t> shape;
  std::vector<int64_t> alt_shape;  // a second accepted shape (g_proj per-element gating), else empty
  int64_t rows() const { return linear ? shape[shape.size() - 2] : 0; }
  int64_t in() const { return linear ? shape.back() : 0; }
  int64_t experts() const { return linear && shape.size() == 3 ? shape[0] : 0; }
};

// How a layer stores its routed experts: one Linear per expert (released checkpoints) or stacked
// gate_up_proj [E, 2I, H] / down_proj [E, H, I] (fused saves, gridbook artifacts).
enum class ExpertLayout { kPerExpert, kStacked };

// Every module of a Laguna config (model_type "laguna"). `layout(l)` tells how MoE layer l stores experts.
// Spellings are canonical: `mlp.shared_expert`, `mlp.experts.e_score_correction_bias` (see spelling_alias).
Expected<std::vector<ModuleSpec>> laguna_module_specs(const nlohmann::json& config,
                                                      const std::function<ExpertLayout(int layer)>& layout);

// Maps the accepted alternative spellings of laguna.md §4 to the canonical one used by ModuleSpec:
// `mlp.shared_experts.` -> `mlp.shared_expert.`, `mlp.gate.e_score_correction_bias` ->
// `mlp.experts.e_score_correction_bias`; other names are returned canonicalised only.
std::string spelling_alias(std::string_view module_name);

}  // namespace gridq::gridbook

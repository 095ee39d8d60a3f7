// Component classification of module and tensor names, for size reports (gridq inspect) and the
// per-component totals that the Laguna size arithmetic is written in (laguna.md §3).
#pragma once

#include <array>
#include <string_view>

namespace gridq::gridbook {

enum class Component {
  kRoutedExperts,  // mlp.experts.{e}.{gate,up,down}_proj and the stacked experts.{gate_up,down}_proj
  kAttention,      // self_attn.{q,k,v,o}_proj
  kGProj,          // self_attn.g_proj (the per-head output gate)
  kSharedExperts,  // mlp.shared_expert(s).*
  kDenseMlp,       // mlp.{gate,up,down}_proj of a dense layer
  kRouters,        // mlp.gate (router) and e_score_correction_bias
  kEmbed,          // embed_tokens
  kLmHead,         // lm_head
  kNorms,          // every RMSNorm weight, incl. q_norm / k_norm
  kOther,          // anything else (an artifact refuses these; inspect of a raw checkpoint lists them)
};

inline constexpr std::array<Component, 10> kAllComponents = {
    Component::kRoutedExperts, Component::kAttention, Component::kGProj, Component::kSharedExperts,
    Component::kDenseMlp,      Component::kRouters,   Component::kEmbed, Component::kLmHead,
    Component::kNorms,         Component::kOther};

// Stable snake_case names used in `gridq inspect --json` (docs/inspect.md).
std::string_view component_name(Component c);

// Classifies a tensor name (`…q_proj.weight`, `…cb_qweight`) or a module name (`…q_proj`). Name-based only,
// after namespace canonicalisation (matching.h): the same rules serve raw checkpoints and artifacts.
Component classify_component(std::string_view name);

}  // namespace gridq::gridbook

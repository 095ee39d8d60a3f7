#include "gridbook/components.h"

#include <string>
#include <vector>

#include "gridbook/matching.h"

namespace gridq::gridbook {

std::string_view component_name(Component c) {
  switch (c) {
    case Component::kRoutedExperts:
      return "routed_experts";
    case Component::kAttention:
      return "attention";
    case Component::kGProj:
      return "g_proj";
    case Component::kSharedExperts:
      return "shared_experts";
    case Component::kDenseMlp:
      return "dense_mlp";
    case Component::kRouters:
      return "routers";
    case Component::kEmbed:
      return "embed_tokens";
    case Component::kLmHead:
      return "lm_head";
    case Component::kNorms:
      return "norms";
    case Component::kOther:
      return "other";
  }
  return "other";
}

namespace {

std::vector<std::string_view> split_dots(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (dot == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, dot - start));
    start = dot + 1;
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Component classify_component(std::string_view raw) {
  const std::string name = canonical_module_name(raw);
  const auto parts = split_dots(name);
  if (parts.empty()) return Component::kOther;
  if (parts[0] == "lm_head") return Component::kLmHead;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    const std::string_view next = i + 1 < parts.size() ? parts[i + 1] : std::string_view{};
    if (p == "embed_tokens") return Component::kEmbed;
    if (p == "self_attn") {
      if (next == "q_proj" || next == "k_proj" || next == "v_proj" || next == "o_proj")
        return Component::kAttention;
      if (next == "g_proj") return Component::kGProj;
      if (next == "q_norm" || next == "k_norm") return Component::kNorms;
      return Component::kOther;
    }
    if (p == "mlp") {
      if (next == "experts") {
        // The router correction bias lives under `experts` on disk but belongs to the router.
        return parts.back() == "e_score_correction_bias" ? Component::kRouters : Component::kRoutedExperts;
      }
      if (next == "shared_expert" || next == "shared_experts") return Component::kSharedExperts;
      if (next == "gate") return Component::kRouters;
      if (next == "gate_proj" || next == "up_proj" || next == "down_proj") return Component::kDenseMlp;
      return Component::kOther;
    }
    if (p == "norm" || ends_with(p, "layernorm")) return Component::kNorms;
  }
  return Component::kOther;
}

}  // namespace gridq::gridbook

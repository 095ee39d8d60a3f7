// Target and ignore matching (format.md §13), done the strict way:
//  - a literal entry matches only the identical module name (no prefix, no substring);
//  - `re:<pattern>` matches when the pattern matches at the start of the name (Python re.match: anchored at
//    position 0, not required to reach the end), compiled with PCRE2; constructs whose meaning differs from
//    Python's `re` (look-behind, \p{…}, PCRE-only escapes and verbs) are refused;
//  - names are compared after one namespace canonicalisation (model.language_model.X, language_model.model.X
//    -> model.X), applied to both sides;
//  - every Linear is claimed exactly once (codebook target, compressed-tensors target or ignore); overlaps,
//    unclaimed Linears, disagreeing fused shards and misspelled routed-expert targets are refused.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gridq::gridbook {

// model.language_model.X and language_model.model.X -> model.X; anything else unchanged.
std::string canonical_module_name(std::string_view name);

// One `targets` / `ignore` entry.
class Pattern {
 public:
  static Expected<Pattern> compile(std::string_view entry);
  bool matches(std::string_view module_name) const;  // canonicalises module_name itself
  const std::string& entry() const { return entry_; }
  bool is_regex() const { return code_ != nullptr; }

 private:
  std::string entry_;
  std::string literal_;         // canonical literal (literal entries)
  std::shared_ptr<void> code_;  // pcre2_code_8 (regex entries)
};

// A routed-expert module name: `<prefix>.experts.<leaf>` (stacked) or `<prefix>.experts.<e>.<leaf>`
// (one expert), leaf ∈ {gate_up_proj, gate_proj, up_proj, down_proj}. `experts2.…` is not an expert.
struct RoutedExpertName {
  std::string experts_prefix;  // "model.layers.1.mlp.experts"
  std::optional<int> expert;   // set for per-expert names
  std::string leaf;
};
std::optional<RoutedExpertName> parse_routed_expert(std::string_view module_name);

// The run-time fusion a module takes part in: q/k/v share one GEMM, gate/up (dense, shared, per-expert)
// another. Returns "<parent>.qkv" / "<parent>.gate_up", or nothing. g_proj is not fused: the Laguna recipe
// keeps it BF16 while q/k/v are FP8.
std::optional<std::string> fused_set(std::string_view module_name);

enum class ClaimKind { kCodebook, kCompressedTensors, kIgnore };
std::string_view claim_kind_name(ClaimKind k);

struct ClaimGroup {
  std::string name;
  ClaimKind kind;  // kCodebook or kCompressedTensors
  std::vector<Pattern> targets;
};

struct Claim {
  ClaimKind kind;
  int group = -1;     // index into the ClaimGroup list; -1 for ignore
  std::string entry;  // the entry that matched (first one)
};

// Claims every Linear module exactly once. `linear_modules` and `other_modules` (norms, embeddings, biases:
// they may be listed in ignore but never targeted) are on-disk names. Refuses: a Linear matched by none or by
// two claimers; a target matching a non-Linear; a literal entry naming nothing; a codebook-group literal
// naming an experts stack parent instead of a leaf; fused shards with different claims; two spellings that
// canonicalise to one name. Result is parallel to linear_modules.
Expected<std::vector<Claim>> claim_modules(const std::vector<ClaimGroup>& groups,
                                           const std::vector<Pattern>& ignore,
                                           const std::vector<std::string>& linear_modules,
                                           const std::vector<std::string>& other_modules);

}  // namespace gridq::gridbook

// Recipes are data (quantizer.md §1): a JSON file of rules matching *source tensor names* with anchored
// full-match regexes, first match wins. Presets live in recipes/<name>.json ("--recipe laguna" loads
// recipes/laguna.json; a path loads that file). The plan (S0) resolves every source tensor to a rule and a
// format and checks eligibility; any tensor left unmatched fails, and under `strict` so does a rule that
// matches nothing. docs/recipes.md documents every key.
//
//   auto r = load_recipe("laguna", repo_root);                   // or a path to a .json file
//   auto plan = make_plan(*r, tensors, /*strict=*/false);        // tensors: name, dtype, shape
//   for (auto& t : plan->tensors) ... t.format ...
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gridbook/rung.h"

namespace gridq::quant {

// One rule. `format` is "BF16" (copy the source bytes unchanged, never a cast), "FP8_DYNAMIC",
// "NVFP4_CB_K{12..24}" or "FP8_CB_K{28..48}" (the gridbook rung names).
struct RecipeRule {
  std::string match;  // anchored full-match regex over the source tensor name
  std::string format;
  std::string scale_coding = "two_tier";  // NVFP4-CB: "two_tier" (v2) or "v1"
  std::string codebook = "lattice";       // "lattice", "learned" or "learned-per-layer"
  // "cb_gptq" or "rtn" (CB and FP8_DYNAMIC; BF16 ignores it). parse_recipe fills the default by format when
  // the key is absent: "cb_gptq" for CB rungs, "rtn" for FP8_DYNAMIC (quantizer.md §6: GPTQ is optional
  // there; the compressed-tensors preset is round-to-nearest).
  std::string encoder = "cb_gptq";
};

struct CbGptqParams {
  double damp = 0.1;
  int block = 256;
  bool holdout_gate = true;
  // Accepted only with the one value gridq implements (the JSON keys exist so a recipe says what it means):
  std::string step = "sub";  // slab = one sub-vector
  // true: NVFP4-CB only, group-wise (cb_act_order.h): superblocks and their 16-column groups in descending
  // Σ diag H; codewords stay contiguous in column order.
  bool act_order = false;
  std::string scales = "lazy";  // scales searched on the compensated weights
  // Refinement after the GPTQ pass (cb_refine.h, NVFP4-CB only): rounds of H-metric coordinate descent over
  // the codes with the scales fixed, and (refine_scales) over each group's scale code with the codes fixed.
  // A tensor keeps the refined encoding only if its holdout output-MSE is <= the unrefined one's.
  int refine_passes = 0;
  bool refine_scales = false;
};
struct TwoTierParams {
  std::string tier = "max";  // the only tier rule implemented
  int pilot_rows = 256;
  int refits = 2;
};

struct Recipe {
  std::string name;  // "recipe" key, e.g. "laguna-s-2.1/nvfp4cb-k16-v2"
  int version = 1;
  std::string model_type;   // must equal config.json model_type (check_model_type)
  std::string description;  // optional free text
  int64_t calib_tokens = 65536;
  int calib_seq_len = 512;
  int holdout_every = 16;
  bool router_weighted_hessian = false;
  std::vector<RecipeRule> rules;
  CbGptqParams cb_gptq;
  TwoTierParams two_tier;
  std::string sha256;     // of the recipe file's bytes (provenance)
  nlohmann::json source;  // the parsed file as written (copied into provenance verbatim)
};

// Format helpers shared by the recipe parser, the plan and the pipeline.
bool is_cb_format(std::string_view format);  // NVFP4_CB_K* / FP8_CB_K* (syntax only)
// The rung of a CB rule (layout 2 for "two_tier", 1 for "v1"); an error for BF16/FP8_DYNAMIC or a bad name.
Expected<gridbook::Rung> rule_rung(const RecipeRule& rule);

// Strict parse: unknown keys, unknown formats, bad regexes, wrong types are refused naming the key.
Expected<Recipe> parse_recipe(const std::string& bytes, const std::string& label);
// `name_or_path`: a path (it contains '/' or ends in ".json") loads that file; anything else is a preset
// name ([A-Za-z0-9._-]+) looked up in recipe_search_dirs(repo_root) in order. Unknown names list the
// presets.
Expected<Recipe> load_recipe(const std::string& name_or_path, const std::string& repo_root);
// <repo_root>/recipes (when repo_root is not empty), then next to the executable:
// <exe>/../share/gridq/recipes (installed) and <exe>/../recipes (a build directory inside the source tree).
std::vector<std::string> recipe_search_dirs(const std::string& repo_root);
std::vector<std::string> preset_names(const std::string& repo_root);  // sorted, unique

// recipe.model_type == config["model_type"], else an error naming both.
Status check_model_type(const Recipe& recipe, const nlohmann::json& config);

struct SourceTensor {
  std::string name;
  std::string dtype;  // safetensors dtype string ("BF16", "F32", …)
  std::vector<int64_t> shape;
};

struct PlannedTensor {
  std::string name;
  int rule = -1;       // index into recipe.rules
  std::string format;  // the rule's format
  std::vector<int64_t> shape;
  std::string dtype;  // source dtype
  std::string unit;   // allocation unit / fusion group (plan_unit_name)
};

struct Plan {
  std::vector<PlannedTensor> tensors;  // in source order (sorted by name)
  std::vector<int64_t> rule_hits;      // [rules] tensors matched per rule
  nlohmann::json to_json() const;      // tensor → {rule, format}: written into the artifact's provenance
};

// The unit a tensor belongs to (quantizer.md §7): the routed stack of one layer for routed experts
// ("model.layers.3.mlp.experts"), the fused sibling group for q/k/v ("….self_attn.qkv_proj") and gate/up
// ("….mlp.gate_up_proj", "….mlp.shared_expert.gate_up_proj"), otherwise the name without ".weight".
// Members of one unit must share the format (and, for CB, codebook and scale coding): the serving side
// fuses siblings and gridbook requires one scheme per routed stack.
std::string plan_unit_name(std::string_view tensor_name);

// Resolves every tensor. Eligibility: CB formats need a 2-D weight with C % 256 == 0 (NVFP4-CB also
// R % 8 == 0); FP8_DYNAMIC needs 2-D; a non-BF16 format on a 1-D tensor or a non-float source is refused;
// members of one unit (plan_unit_name) must agree. Errors name the tensor, the rule and the failed
// condition. Unmatched tensors are listed (the first 20, then a count).
Expected<Plan> make_plan(const Recipe& recipe, const std::vector<SourceTensor>& tensors, bool strict);

}  // namespace gridq::quant

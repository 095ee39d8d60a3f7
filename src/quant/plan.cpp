// S0, the plan (quantizer.md §2): every source tensor → the first rule whose regex matches its whole name →
// a format, with the eligibility rules of format.md §4 and the one-scheme-per-unit rule checked here, before
// any weight is read, so a recipe that cannot produce a valid artifact fails in milliseconds.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "quant/recipe.h"
#include "quant/recipe_regex.h"

namespace gridq::quant {
namespace {

constexpr size_t kListNames = 20;  // names shown in an "unmatched" error before "… and N more"

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Eligibility of one tensor for its rule's format; the message names the failed condition.
Status check_eligible(const SourceTensor& t, const RecipeRule& rule) {
  if (rule.format == "BF16") return Status();  // copied byte for byte, whatever it is
  if (t.dtype != "BF16" && t.dtype != "F16" && t.dtype != "F32")
    return err("source dtype {} is not a float type (BF16, F16, F32); only BF16 (copy) applies", t.dtype);
  if (t.shape.size() != 2)
    return err("{} needs a 2-D weight [R, C], the shape is {}", rule.format, shape_str(t.shape));
  const int64_t R = t.shape[0], C = t.shape[1];
  if (R <= 0 || C <= 0)
    return err("{} needs a non-empty weight, the shape is {}", rule.format, shape_str(t.shape));
  if (R > INT32_MAX || C > INT32_MAX)
    return err("shape {} exceeds the encoders' 32-bit dimensions", shape_str(t.shape));
  if (!is_cb_format(rule.format)) return Status();
  if (C % 256 != 0) return err("{} needs in_features C % 256 == 0 (format.md §4), C = {}", rule.format, C);
  if (rule.format.rfind("NVFP4_", 0) == 0 && R % 8 != 0)
    return err("{} needs rows R % 8 == 0 (quantizer.md §2 S0), R = {}", rule.format, R);
  return Status();
}

}  // namespace

std::string plan_unit_name(std::string_view name) {
  std::string_view base = name;
  if (ends_with(base, ".weight")) base.remove_suffix(7);
  const size_t dot = base.rfind('.');
  if (dot == std::string_view::npos) return std::string(base);
  const std::string_view parent = base.substr(0, dot), leaf = base.substr(dot + 1);
  const bool gate_up = leaf == "gate_proj" || leaf == "up_proj";
  // Routed expert: <prefix>.experts.<e>.{gate,up,down}_proj -> the layer's stack <prefix>.experts.
  if (gate_up || leaf == "down_proj") {
    const size_t d2 = parent.rfind('.');
    if (d2 != std::string_view::npos && all_digits(parent.substr(d2 + 1)) &&
        ends_with(parent.substr(0, d2), ".experts"))
      return std::string(parent.substr(0, d2));
  }
  // The sets gridbook's matcher fuses at run time (gridbook/matching.cpp fused_set).
  const bool attn = ends_with(parent, "self_attn");
  if (attn && (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj"))
    return std::string(parent) + ".qkv_proj";
  if (!attn && gate_up) return std::string(parent) + ".gate_up_proj";
  return std::string(base);
}

nlohmann::json Plan::to_json() const {
  nlohmann::json j = nlohmann::json::object();  // std::map underneath: keys sorted, dump is deterministic
  for (const PlannedTensor& t : tensors) j[t.name] = {{"rule", t.rule}, {"format", t.format}};
  return j;
}

Expected<Plan> make_plan(const Recipe& recipe, const std::vector<SourceTensor>& tensors, bool strict) {
  const std::string who = "recipe '" + recipe.name + "'";
  if (recipe.rules.empty()) return err("{}: no rules", who);
  std::vector<std::shared_ptr<const NameRegex>> regex;
  for (size_t i = 0; i < recipe.rules.size(); ++i) {
    auto re = NameRegex::compile(recipe.rules[i].match);
    if (!re.ok()) return err("{}: rules[{}].match \"{}\": {}", who, i, recipe.rules[i].match, re.message());
    regex.push_back(*re);
  }

  std::vector<const SourceTensor*> order;
  for (const SourceTensor& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const SourceTensor* a, const SourceTensor* b) { return a->name < b->name; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->name == order[i - 1]->name)
      return err("{}: tensor '{}' is listed twice", who, order[i]->name);

  Plan plan;
  plan.rule_hits.assign(recipe.rules.size(), 0);
  std::vector<std::string> unmatched;
  for (const SourceTensor* t : order) {
    int hit = -1;
    for (size_t i = 0; i < regex.size() && hit < 0; ++i) {
      GRIDQ_ASSIGN_OR_RETURN(bool m, regex[i]->full_match(t->name));
      if (m) hit = static_cast<int>(i);
    }
    if (hit < 0) {
      unmatched.push_back(t->name);
      continue;
    }
    ++plan.rule_hits[hit];
    const RecipeRule& rule = recipe.rules[hit];
    if (Status st = check_eligible(*t, rule); !st.ok())
      return err("{}: tensor '{}' (shape {}, {}) matched rules[{}] \"{}\" -> {}, but {}", who, t->name,
                 shape_str(t->shape), t->dtype, hit, rule.match, rule.format, st.message());
    plan.tensors.push_back({t->name, hit, rule.format, t->shape, t->dtype, plan_unit_name(t->name)});
  }
  if (!unmatched.empty()) {
    std::string list;
    for (size_t i = 0; i < unmatched.size() && i < kListNames; ++i) list += (i ? ", " : "") + unmatched[i];
    if (unmatched.size() > kListNames) list += fmt::format(" … and {} more", unmatched.size() - kListNames);
    return err(
        "{}: {} tensor(s) match no rule (every tensor must be claimed; rules are anchored full "
        "matches, first match wins): {}",
        who, unmatched.size(), list);
  }
  if (strict) {
    std::string idle;
    for (size_t i = 0; i < recipe.rules.size(); ++i)
      if (plan.rule_hits[i] == 0)
        idle += fmt::format("{}rules[{}] \"{}\"", idle.empty() ? "" : ", ", i, recipe.rules[i].match);
    if (!idle.empty()) return err("{}: --strict: rule(s) matching no tensor: {}", who, idle);
  }

  // One scheme per unit: fused siblings are served as one matrix and a routed stack has one gridbook scheme.
  std::map<std::string, const PlannedTensor*> first;
  for (const PlannedTensor& t : plan.tensors) {
    auto [it, fresh] = first.emplace(t.unit, &t);
    if (fresh) continue;
    const PlannedTensor& a = *it->second;
    const RecipeRule& ra = recipe.rules[a.rule];
    const RecipeRule& rb = recipe.rules[t.rule];
    std::string what;
    if (a.format != t.format) {
      what = "format";
    } else if (is_cb_format(t.format) && ra.codebook != rb.codebook) {
      what = "codebook";
    } else if (t.format.rfind("NVFP4_", 0) == 0 && ra.scale_coding != rb.scale_coding) {
      what = "scale_coding";
    }
    if (!what.empty())
      return err(
          "{}: tensors '{}' (rules[{}], {}) and '{}' (rules[{}], {}) belong to one unit '{}' and must "
          "share the {} (fused siblings and routed stacks have one scheme, quantizer.md §7)",
          who, a.name, a.rule, a.format, t.name, t.rule, t.format, t.unit, what);
  }
  return plan;
}

}  // namespace gridq::quant

#include "model/adapter_util.h"

#include <cmath>
#include <cstdio>

namespace gridq::model::detail {

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

Expected<int> cfg_int(const nlohmann::json& c, std::string_view key) {
  auto it = c.find(std::string(key));
  if (it == c.end() || !it->is_number_integer()) return err("config.json: key '{}' missing or not an integer", key);
  return it->get<int>();
}
int cfg_int_or(const nlohmann::json& c, std::string_view key, int dflt) {
  auto it = c.find(std::string(key));
  return (it == c.end() || !it->is_number_integer()) ? dflt : it->get<int>();
}
Expected<double> cfg_num(const nlohmann::json& c, std::string_view key) {
  auto it = c.find(std::string(key));
  if (it == c.end() || !it->is_number()) return err("config.json: key '{}' missing or not a number", key);
  return it->get<double>();
}
double cfg_num_or(const nlohmann::json& c, std::string_view key, double dflt) {
  auto it = c.find(std::string(key));
  return (it == c.end() || !it->is_number()) ? dflt : it->get<double>();
}
bool cfg_bool_or(const nlohmann::json& c, std::string_view key, bool dflt) {
  auto it = c.find(std::string(key));
  return (it == c.end() || !it->is_boolean()) ? dflt : it->get<bool>();
}
std::vector<int> cfg_int_list(const nlohmann::json& c, std::string_view key) {
  std::vector<int> out;
  auto it = c.find(std::string(key));
  if (it == c.end() || it->is_null()) return out;
  if (it->is_number_integer()) {
    out.push_back(it->get<int>());
  } else if (it->is_array()) {
    for (const auto& v : *it)
      if (v.is_number_integer()) out.push_back(v.get<int>());
  }
  return out;
}

Expected<RopeParams> rope_from_json(const nlohmann::json& p, int head_dim, int max_pos, std::string_view where) {
  RopeParams r;
  r.type = p.value("rope_type", p.value("type", std::string("default")));
  GRIDQ_ASSIGN_OR_RETURN(r.theta, cfg_num(p, "rope_theta"));
  const double partial = cfg_num_or(p, "partial_rotary_factor", 1.0);
  r.rotary_dim = static_cast<int>(head_dim * partial);
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > head_dim)
    return err("{}: partial_rotary_factor {} gives rotary width {} (must be even, in (0, {}])", where, partial,
               r.rotary_dim, head_dim);
  if (r.type == "default") {
    r.inv_freq = rope_default_inv_freq(r.theta, r.rotary_dim);
  } else if (r.type == "yarn") {
    GRIDQ_ASSIGN_OR_RETURN(double l0, cfg_num(p, "original_max_position_embeddings"));
    double f = cfg_num_or(p, "factor", 0.0);
    if (f <= 0.0) f = static_cast<double>(max_pos) / l0;
    if (std::abs(f - static_cast<double>(max_pos) / l0) > 1e-9)
      std::fprintf(stderr, "gridq: warning: %.*s: yarn factor %g differs from max_position_embeddings/original %g\n",
                   static_cast<int>(where.size()), where.data(), f, static_cast<double>(max_pos) / l0);
    if (p.contains("mscale") || p.contains("mscale_all_dim"))
      return err("{}: yarn mscale/mscale_all_dim are not supported (rule: only attention_factor is)", where);
    const double beta_fast = cfg_num_or(p, "beta_fast", 32.0);
    const double beta_slow = cfg_num_or(p, "beta_slow", 1.0);
    if (!cfg_bool_or(p, "truncate", true))
      return err("{}: yarn truncate=false is not supported", where);
    auto it = p.find("attention_factor");
    r.attention_factor = static_cast<float>((it != p.end() && it->is_number()) ? it->get<double>()
                                                                               : 0.1 * std::log(f) + 1.0);
    r.inv_freq = rope_yarn_inv_freq(r.theta, r.rotary_dim, f, l0, beta_fast, beta_slow);
  } else if (r.type == "llama3") {
    GRIDQ_ASSIGN_OR_RETURN(double f, cfg_num(p, "factor"));
    GRIDQ_ASSIGN_OR_RETURN(double lo, cfg_num(p, "low_freq_factor"));
    GRIDQ_ASSIGN_OR_RETURN(double hi, cfg_num(p, "high_freq_factor"));
    GRIDQ_ASSIGN_OR_RETURN(double l0, cfg_num(p, "original_max_position_embeddings"));
    r.inv_freq = rope_llama3_inv_freq(r.theta, r.rotary_dim, f, lo, hi, l0);
  } else {
    return err("{}: rope_type '{}' is not supported (supported: default, yarn, llama3)", where, r.type);
  }
  return r;
}

const io::TensorInfo* TensorClaimer::peek(std::string_view name) const {
  auto it = table_.find(name);
  return it == table_.end() ? nullptr : it->second;
}

Status TensorClaimer::check(const std::string& name, const std::vector<int64_t>& shape) {
  const io::TensorInfo* t = peek(name);
  if (!t) return err("checkpoint: required tensor '{}' is missing", name);
  if (t->dtype != io::DType::BF16 && t->dtype != io::DType::F32)
    return err("checkpoint: tensor '{}' has dtype {} (expected BF16 or F32)", name, io::dtype_name(t->dtype));
  if (t->shape != shape)
    return err("checkpoint: tensor '{}' has shape {}, expected {}", name, shape_str(t->shape), shape_str(shape));
  if (consumed_.count(name)) return err("checkpoint: tensor '{}' claimed twice", name);
  consumed_.insert(name);
  return {};
}

Status TensorClaimer::matrix(WeightMap& w, std::string role, const std::string& name, int64_t rows, int64_t cols) {
  GRIDQ_RETURN_IF_ERROR(check(name, {rows, cols}));
  w.set(std::move(role), WeightRef{name, peek(name), -1, 0, rows, cols});
  return {};
}

Status TensorClaimer::vector(WeightMap& w, std::string role, const std::string& name, int64_t n) {
  GRIDQ_RETURN_IF_ERROR(check(name, {n}));
  w.set(std::move(role), WeightRef{name, peek(name), -1, 0, n, 1});
  return {};
}

Status TensorClaimer::fused_stack(const std::string& name, int64_t e, int64_t r, int64_t c) {
  return check(name, {e, r, c});
}

void TensorClaimer::fused_view(WeightMap& w, std::string role, const std::string& name, int64_t expert,
                               int64_t row0, int64_t rows, int64_t cols) {
  w.set(std::move(role), WeightRef{name, peek(name), expert, row0, rows, cols});
}

Status TensorClaimer::finish(std::string_view arch) const {
  std::vector<std::string> extra;
  for (const auto& [name, info] : table_)
    if (!consumed_.count(name)) extra.push_back(name);
  if (extra.empty()) return {};
  std::string list;
  for (size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", " : "") + extra[i];
  return err("checkpoint: {} unknown tensor(s) for {}: {}{}", extra.size(), arch, list, extra.size() > 5 ? ", ..." : "");
}

}  // namespace gridq::model::detail

namespace gridq::model::detail {

Status claim_experts(TensorClaimer& c, WeightMap& w, const std::string& prefix, int l, int n_experts, int inter,
                     int hidden) {
  const std::string fused_gu = prefix + ".gate_up_proj";
  const std::string fused_down = prefix + ".down_proj";
  const bool fused = c.has(fused_gu) || c.has(fused_down);
  bool per_expert = false;
  for (int e = 0; e < n_experts && !per_expert; ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      if (c.has(fmt::format("{}.{}.{}.weight", prefix, e, p))) per_expert = true;
  if (fused && per_expert)
    return err("checkpoint: layer {} mixes fused ({}) and per-expert expert tensors", l, fused_gu);
  if (fused) {
    GRIDQ_RETURN_IF_ERROR(c.fused_stack(fused_gu, n_experts, 2 * inter, hidden));
    GRIDQ_RETURN_IF_ERROR(c.fused_stack(fused_down, n_experts, hidden, inter));
    for (int e = 0; e < n_experts; ++e) {
      c.fused_view(w, roles::expert(l, e, "gate"), fused_gu, e, 0, inter, hidden);
      c.fused_view(w, roles::expert(l, e, "up"), fused_gu, e, inter, inter, hidden);
      c.fused_view(w, roles::expert(l, e, "down"), fused_down, e, 0, hidden, inter);
    }
    return {};
  }
  for (int e = 0; e < n_experts; ++e) {
    GRIDQ_RETURN_IF_ERROR(claim_swiglu(c, w, fmt::format("{}.{}", prefix, e), roles::expert(l, e, "gate"),
                                       roles::expert(l, e, "up"), roles::expert(l, e, "down"), inter, hidden));
  }
  return {};
}

Status claim_swiglu(TensorClaimer& c, WeightMap& w, const std::string& prefix, const std::string& gate_role,
                    const std::string& up_role, const std::string& down_role, int inter, int hidden) {
  GRIDQ_RETURN_IF_ERROR(c.matrix(w, gate_role, prefix + ".gate_proj.weight", inter, hidden));
  GRIDQ_RETURN_IF_ERROR(c.matrix(w, up_role, prefix + ".up_proj.weight", inter, hidden));
  GRIDQ_RETURN_IF_ERROR(c.matrix(w, down_role, prefix + ".down_proj.weight", hidden, inter));
  return {};
}

}  // namespace gridq::model::detail

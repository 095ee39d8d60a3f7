// Helpers shared by the architecture adapters: typed config reads that name the key, and a tensor
// claimer that checks dtype/shape, records roles, and at the end refuses every unconsumed tensor.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/loader.h"

namespace gridq::model::detail {

Expected<int> cfg_int(const nlohmann::json& c, std::string_view key);
int cfg_int_or(const nlohmann::json& c, std::string_view key, int dflt);
Expected<double> cfg_num(const nlohmann::json& c, std::string_view key);
double cfg_num_or(const nlohmann::json& c, std::string_view key, double dflt);
bool cfg_bool_or(const nlohmann::json& c, std::string_view key, bool dflt);
// Reads an int or a list of ints (eos_token_id); missing/null -> empty.
std::vector<int> cfg_int_list(const nlohmann::json& c, std::string_view key);

// Builds RopeParams for one rope_parameters set (keys rope_type, rope_theta, partial_rotary_factor,
// factor, ...). `max_pos` is max_position_embeddings (YaRN factor fallback).
Expected<RopeParams> rope_from_json(const nlohmann::json& p, int head_dim, int max_pos, std::string_view where);

class TensorClaimer {
 public:
  explicit TensorClaimer(const TensorTable& t) : table_(t) {}
  bool has(std::string_view name) const { return table_.find(name) != table_.end(); }
  const io::TensorInfo* peek(std::string_view name) const;
  // 2-D [rows, cols] BF16/F32 matrix.
  Status matrix(WeightMap& w, std::string role, const std::string& name, int64_t rows, int64_t cols);
  // 1-D [n] BF16/F32 vector.
  Status vector(WeightMap& w, std::string role, const std::string& name, int64_t n);
  // Fused expert stack [E, R, C]: claims the whole tensor once, maps expert e rows [row0, row0+rows).
  Status fused_stack(const std::string& name, int64_t e, int64_t r, int64_t c);
  void fused_view(WeightMap& w, std::string role, const std::string& name, int64_t expert, int64_t row0,
                  int64_t rows, int64_t cols);
  void ignore(const std::string& name) { consumed_.insert(name); }
  // Errors on the first unconsumed tensor (lists up to 5), naming the architecture.
  Status finish(std::string_view arch) const;

 private:
  Status check(const std::string& name, const std::vector<int64_t>& shape);
  const TensorTable& table_;
  std::set<std::string, std::less<>> consumed_;
};

}  // namespace gridq::model::detail

namespace gridq::model::detail {
// Routed experts of layer l under `prefix` (e.g. "model.layers.3.mlp.experts"), per-expert
// ({prefix}.{e}.{gate,up,down}_proj.weight) or fused ({prefix}.gate_up_proj [E, 2I, H], {prefix}.down_proj
// [E, H, I]); a layer that mixes both is refused.
Status claim_experts(TensorClaimer& c, WeightMap& w, const std::string& prefix, int l, int n_experts, int inter,
                     int hidden);
// SwiGLU block {prefix}.{gate,up,down}_proj.weight into roles gate/up/down.
Status claim_swiglu(TensorClaimer& c, WeightMap& w, const std::string& prefix, const std::string& gate_role,
                    const std::string& up_role, const std::string& down_role, int inter, int hidden);
}  // namespace gridq::model::detail

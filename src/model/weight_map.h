// Canonical weight roles -> on-disk tensors. Adapters fill a WeightMap; the runtime and the quantizer look
// weights up only by role (role names below), so expert layout (per-expert or fused stacks) and name
// spellings (shared_expert / shared_experts, bias under experts or gate) are resolved once, here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace gridq::model {

// A 2-D [rows, cols] view of (part of) one tensor. Vectors are [n, 1].
struct WeightRef {
  std::string tensor;                     // on-disk name
  const io::TensorInfo* info = nullptr;   // data points into the mmap
  int64_t expert = -1;                    // fused stacks [E, R, C]: index along dim 0, else -1
  int64_t row0 = 0;                       // first row inside the (expert) matrix: gate_up_proj splits at I
  int64_t rows = 0;
  int64_t cols = 0;

  // Byte offset of element [row0, 0] of this view inside info->data.
  uint64_t byte_offset() const;
  const uint8_t* data() const { return info->data + byte_offset(); }
};

// Role names. Layer roles are "layers.{l}.<suffix>"; expert roles "layers.{l}.moe.experts.{e}.{gate,up,down}".
namespace roles {
inline constexpr std::string_view kEmbed = "embed";             // [vocab, H]
inline constexpr std::string_view kFinalNorm = "final_norm";    // [H]
inline constexpr std::string_view kLmHead = "lm_head";          // [vocab, H]
// Layer suffixes.
inline constexpr std::string_view kInputNorm = "input_norm";    // [H]
inline constexpr std::string_view kPostNorm = "post_norm";      // [H]
inline constexpr std::string_view kQ = "attn.q";                // [n_h*d, H]
inline constexpr std::string_view kK = "attn.k";                // [n_kv*d, H]
inline constexpr std::string_view kV = "attn.v";                // [n_kv*d, H]
inline constexpr std::string_view kO = "attn.o";                // [H, n_h*d]
inline constexpr std::string_view kG = "attn.g";                // [n_h, H] or [n_h*d, H]
inline constexpr std::string_view kQNorm = "attn.q_norm";       // [d]
inline constexpr std::string_view kKNorm = "attn.k_norm";       // [d]
inline constexpr std::string_view kMlpGate = "mlp.gate";        // dense [D, H]
inline constexpr std::string_view kMlpUp = "mlp.up";            // dense [D, H]
inline constexpr std::string_view kMlpDown = "mlp.down";        // dense [H, D]
inline constexpr std::string_view kRouter = "moe.router";       // [E, H]
inline constexpr std::string_view kRouterBias = "moe.bias";     // [E]
inline constexpr std::string_view kSharedGate = "moe.shared.gate";  // [I_s, H]
inline constexpr std::string_view kSharedUp = "moe.shared.up";      // [I_s, H]
inline constexpr std::string_view kSharedDown = "moe.shared.down";  // [H, I_s]

std::string layer(int l, std::string_view suffix);
std::string expert(int l, int e, std::string_view proj);  // proj: "gate", "up", "down"
}  // namespace roles

class WeightMap {
 public:
  void set(std::string role, WeightRef ref) { map_[std::move(role)] = std::move(ref); }
  const WeightRef* find(std::string_view role) const;
  bool contains(std::string_view role) const { return find(role) != nullptr; }
  const std::map<std::string, WeightRef, std::less<>>& all() const { return map_; }
  size_t size() const { return map_.size(); }

 private:
  std::map<std::string, WeightRef, std::less<>> map_;
};

}  // namespace gridq::model

#include "model/weight_map.h"

#include <fmt/format.h>

namespace gridq::model {

uint64_t WeightRef::byte_offset() const {
  const uint64_t es = io::dtype_size(info->dtype);
  uint64_t off = 0;
  if (expert >= 0) {
    // Fused stack [E, R, C]: one expert is R*C elements.
    const auto& s = info->shape;
    off += static_cast<uint64_t>(expert) * static_cast<uint64_t>(s[1] * s[2]) * es;
  }
  off += static_cast<uint64_t>(row0) * static_cast<uint64_t>(cols) * es;
  return off;
}

namespace roles {
std::string layer(int l, std::string_view suffix) { return fmt::format("layers.{}.{}", l, suffix); }
std::string expert(int l, int e, std::string_view proj) {
  return fmt::format("layers.{}.moe.experts.{}.{}", l, e, proj);
}
}  // namespace roles

const WeightRef* WeightMap::find(std::string_view role) const {
  auto it = map_.find(role);
  return it == map_.end() ? nullptr : &it->second;
}

}  // namespace gridq::model

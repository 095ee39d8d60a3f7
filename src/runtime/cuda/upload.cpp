#include "runtime/cuda/upload.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/numerics.h"
#include "runtime/cuda/relayout.h"

namespace gridq::cuda {
namespace {

constexpr size_t kSlack = 16;

Status upload_tiles(DeviceWeights& d, const void* data, size_t bytes, const char* what) {
  GRIDQ_ASSIGN_OR_RETURN(d.tiles, DeviceBuffer::alloc(bytes + kSlack, what));
  GRIDQ_RETURN_IF_ERROR(d.tiles.zero());
  GRIDQ_RETURN_IF_ERROR(d.tiles.upload(data, bytes));
  d.resident_bytes += d.tiles.bytes();
  d.relayout_bytes = bytes;
  return {};
}

// Expert e's relaid-out tiles `t` into the experts' buffer: a lone expert's buffer is its own (no copy, no
// second allocation).
template <class T>
Status join_expert(std::vector<T>& all, std::vector<T>&& t, int e, int experts, size_t per) {
  if (t.size() != per) return err("relayout of expert {}: {} values, expected {}", e, t.size(), per);
  if (experts == 1) {
    all = std::move(t);
    return {};
  }
  if (e == 0) all.resize(per * static_cast<size_t>(experts));
  std::memcpy(all.data() + per * static_cast<size_t>(e), t.data(), per * sizeof(T));
  return {};
}

}  // namespace

Expected<DeviceWeights> upload_cb(int k, int v, int rows, int in, int experts,
                                  std::span<const uint8_t> canonical, std::span<const uint16_t> codebook_f16,
                                  const std::array<float, 16>& v2_table) {
  if (experts < 1) return err("upload_cb: experts {} < 1", experts);
  const size_t per = canonical.size() / static_cast<size_t>(experts);
  if (per * static_cast<size_t>(experts) != canonical.size())
    return err("upload_cb: {} bytes do not split into {} experts", canonical.size(), experts);
  const size_t entries = size_t{2} << (k / 2);
  if (codebook_f16.size() != entries * 4)
    return err("upload_cb: codebook has {} FP16 values, expected {} (2 sub-tables × 2^{} × 4)",
               codebook_f16.size(), entries * 4, k / 2);
  std::vector<uint8_t> tiled;
  for (int e = 0; e < experts; ++e) {
    GRIDQ_ASSIGN_OR_RETURN(auto t, cb_relayout(k, v, rows, in, canonical.subspan(per * e, per)));
    GRIDQ_RETURN_IF_ERROR(join_expert(tiled, std::move(t), e, experts, per));
  }
  std::vector<uint16_t> cb(codebook_f16.size());
  for (size_t i = 0; i < cb.size(); ++i) {
    const float f = f16_to_f32(codebook_f16[i]);
    if (!std::isfinite(f)) return err("upload_cb: codebook value {} is not finite", i);
    cb[i] = f32_to_bf16(f);
    if (bf16_to_f32(cb[i]) != f) return err("upload_cb: codebook value {} ({}) is not exact in BF16", i, f);
  }
  DeviceWeights d;
  GRIDQ_RETURN_IF_ERROR(upload_tiles(d, tiled.data(), tiled.size(), "NVFP4-CB tiles"));
  GRIDQ_ASSIGN_OR_RETURN(d.codebook, DeviceBuffer::alloc(cb.size() * 2, "NVFP4-CB codebook"));
  GRIDQ_RETURN_IF_ERROR(d.codebook.upload(cb.data(), cb.size() * 2));
  d.resident_bytes += d.codebook.bytes();
  d.m.format = WeightFormat::CB;
  d.m.rows = rows;
  d.m.in = in;
  d.m.k = k;
  d.m.layout_version = v;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(per);
  d.m.codebook = d.codebook.as<uint16_t>();
  for (int c = 0; c < 16; ++c) {
    const float t = v2_table[static_cast<size_t>(c)];
    const uint16_t b = f32_to_bf16(t);
    if (!(t > 0.0f) || bf16_to_f32(b) != t || e4m3_to_f32(f32_to_e4m3_rne(t)) != t)
      return err("upload_cb: v2 scale table entry {} ({}) is not a positive exact E4M3 value", c, t);
    d.m.v2_table_bf16[c] = b;
  }
  return d;
}

Expected<DeviceWeights> upload_fp8(int rows, int in, int experts, std::span<const uint8_t> e4m3,
                                   std::span<const float> weight_scale) {
  if (experts < 1) return err("upload_fp8: experts {} < 1", experts);
  const size_t per = static_cast<size_t>(rows) * static_cast<size_t>(in);
  if (e4m3.size() != per * static_cast<size_t>(experts))
    return err("upload_fp8: {} bytes, expected {}", e4m3.size(), per * static_cast<size_t>(experts));
  if (weight_scale.size() != static_cast<size_t>(rows) * static_cast<size_t>(experts))
    return err("upload_fp8: weight_scale has {} values, expected {}", weight_scale.size(),
               static_cast<size_t>(rows) * static_cast<size_t>(experts));
  for (size_t i = 0; i < weight_scale.size(); ++i)
    if (!std::isfinite(weight_scale[i]) || !(weight_scale[i] > 0.0f))
      return err("upload_fp8: weight_scale[{}] = {} is not finite and > 0", i, weight_scale[i]);
  std::vector<uint8_t> tiled;
  for (int e = 0; e < experts; ++e) {
    GRIDQ_ASSIGN_OR_RETURN(auto t, fp8_relayout(rows, in, e4m3.subspan(per * e, per)));
    GRIDQ_RETURN_IF_ERROR(join_expert(tiled, std::move(t), e, experts, per));
  }
  DeviceWeights d;
  GRIDQ_RETURN_IF_ERROR(upload_tiles(d, tiled.data(), tiled.size(), "FP8 tiles"));
  GRIDQ_ASSIGN_OR_RETURN(d.scales, DeviceBuffer::alloc(weight_scale.size() * 4, "FP8 weight_scale"));
  GRIDQ_RETURN_IF_ERROR(d.scales.upload(weight_scale.data(), weight_scale.size() * 4));
  d.resident_bytes += d.scales.bytes();
  d.m.format = WeightFormat::FP8;
  d.m.rows = rows;
  d.m.in = in;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(per);
  d.m.row_scale = d.scales.as<float>();
  return d;
}

Expected<DeviceWeights> upload_bf16(int rows, int in, int experts, std::span<const uint16_t> w) {
  if (experts < 1) return err("upload_bf16: experts {} < 1", experts);
  const size_t per = static_cast<size_t>(rows) * static_cast<size_t>(in);
  if (w.size() != per * static_cast<size_t>(experts))
    return err("upload_bf16: {} values, expected {}", w.size(), per * static_cast<size_t>(experts));
  std::vector<uint16_t> tiled;
  for (int e = 0; e < experts; ++e) {
    GRIDQ_ASSIGN_OR_RETURN(auto t, bf16_relayout(rows, in, w.subspan(per * e, per)));
    GRIDQ_RETURN_IF_ERROR(join_expert(tiled, std::move(t), e, experts, per));
  }
  DeviceWeights d;
  GRIDQ_RETURN_IF_ERROR(upload_tiles(d, tiled.data(), tiled.size() * 2, "BF16 tiles"));
  d.m.format = WeightFormat::BF16;
  d.m.rows = rows;
  d.m.in = in;
  d.m.tiles = d.tiles.as<uint8_t>();
  d.m.expert_stride = static_cast<long long>(per * 2);
  return d;
}

Expected<WorkspaceBuffers> WorkspaceBuffers::create() {
  WorkspaceBuffers b;
  GRIDQ_ASSIGN_OR_RETURN(b.counters, DeviceBuffer::alloc(Workspace::kMaxCounters * 4, "split-K counters"));
  GRIDQ_RETURN_IF_ERROR(b.counters.zero());
  GRIDQ_ASSIGN_OR_RETURN(
      b.partials,
      DeviceBuffer::alloc(static_cast<size_t>(Workspace::kMaxPartialFloats) * 4, "split-K partials"));
  GRIDQ_ASSIGN_OR_RETURN(b.barrier, DeviceBuffer::alloc(16, "chain grid barrier"));
  GRIDQ_RETURN_IF_ERROR(b.barrier.zero());
  b.ws.counters = b.counters.as<int>();
  b.ws.partials = b.partials.as<float>();
  b.ws.barrier = b.barrier.as<unsigned>();
  return b;
}

}  // namespace gridq::cuda

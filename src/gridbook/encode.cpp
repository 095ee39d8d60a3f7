// Superblock encode from already-chosen indices and scales. Choosing them (scale search, CB-GPTQ) is the
// quantizer's job; this file only guarantees that what is written is a legal, deterministic superblock.
#include <algorithm>

#include "gridbook/codec.h"

namespace gridq::gridbook {
namespace {

Status expect_rung(const Rung& r, Grid grid, int layout, std::string_view what) {
  GRIDQ_RETURN_IF_ERROR(validate_rung(r));
  if (r.grid != grid || r.layout_version != layout)
    return err("{}: called with rung {} layout {}", what, r.name(), r.layout_version);
  return {};
}

}  // namespace

Status encode_superblock_fp4_v1(const Rung& r, std::span<const uint64_t> codes,
                                const uint8_t scales_e4m3[kFp4Groups], uint8_t* sb) {
  GRIDQ_RETURN_IF_ERROR(expect_rung(r, Grid::FP4, 1, "encode_superblock_fp4_v1"));
  GRIDQ_RETURN_IF_ERROR(check_codes(codes, r.k));
  GRIDQ_RETURN_IF_ERROR(check_v1_plane(scales_e4m3, "encode_superblock_fp4_v1"));
  pack_codes(codes, r.k, sb);
  std::copy(scales_e4m3, scales_e4m3 + kFp4Groups, sb + r.index_bytes());
  return {};
}

Status encode_superblock_fp4_v2(const Rung& r, std::span<const uint64_t> codes, uint8_t E,
                                const uint8_t c[kFp4Groups], uint8_t* sb) {
  GRIDQ_RETURN_IF_ERROR(expect_rung(r, Grid::FP4, 2, "encode_superblock_fp4_v2"));
  GRIDQ_RETURN_IF_ERROR(check_codes(codes, r.k));
  V2Plane p;
  p.E = E;
  for (int g = 0; g < kFp4Groups; ++g) {
    if (!v2_legal(E, c[g]))
      return err("encode_superblock_fp4_v2: group {} pair (E = {}, c = {}) is not a legal two-tier scale", g,
                 E, c[g]);
    p.c[static_cast<size_t>(g)] = c[g];
  }
  pack_codes(codes, r.k, sb);
  write_v2_plane(p, sb + r.index_bytes());
  return {};
}

Status encode_superblock_fp8(const Rung& r, std::span<const uint64_t> codes, uint8_t* sb) {
  GRIDQ_RETURN_IF_ERROR(expect_rung(r, Grid::FP8, 1, "encode_superblock_fp8"));
  GRIDQ_RETURN_IF_ERROR(check_codes(codes, r.k));
  pack_codes(codes, r.k, sb);
  return {};
}

}  // namespace gridq::gridbook

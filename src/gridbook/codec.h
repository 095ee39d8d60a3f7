// Reference codec for CB tensors (format.md §4-§7): codebooks, superblock/row/tensor decode to BF16, and
// superblock encode from given indices and scales. This is the CPU oracle the kernels are tested against;
// it favours obvious code over speed.
//
// Weight reconstruction:  fp4: w = bf16_rn(v · scale_g)          (exact, §16)
//                         fp8: w = bf16_rn(fl32(v · row_scale))  (two roundings, in that order)
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gridbook/packing.h"
#include "gridbook/rung.h"
#include "gridbook/scale_coding.h"

namespace gridq::gridbook {

bool on_e2m1_grid(float v);  // finite and |v| in {0, 0.5, 1, 1.5, 2, 3, 4, 6}
bool on_e4m3_grid(float v);  // finite and exactly representable in E4M3 (|v| <= 448)

struct Codebook {
  Rung rung;
  SubSplit split;
  std::vector<std::vector<float>> sub;  // sub[i]: [2^{b_i}, sub_dim], row-major
  // FP4 books with sub_dim 4 (the product rungs' 4+4 split): each entry's four E2M1 codes (exact: the values
  // are on the grid), coordinate j in bits 4j..4j+3 of a 16-bit quad, stored as byte planes: for sub[0],
  // sub[1], ... in turn, [2^{b_i}] low bytes (coordinates 0, 1), then [2^{b_i}] high bytes (2, 3). The CPU's
  // register decoder looks these up 64 at a time with byte permutes; empty for other books.
  std::vector<uint8_t> fp4_quad_planes;
  // Every sub-table holds the same values (the lattice books: equal shapes get the same table), so a decoder
  // may look every sub-index up in sub[0]'s table.
  bool subs_identical = false;

  // Validates the rung (product only), the table count (n_sub), each table's size (2^{b_i}·sub_dim) and that
  // every value is finite and on the rung's grid. `label` names the book in errors.
  static Expected<Codebook> from_tables(const Rung& r, std::vector<std::vector<float>> tables,
                                        std::string_view label = "codebook");
  // Same from FP16 tables as stored in the sidecar (format.md §10).
  static Expected<Codebook> from_f16_tables(const Rung& r,
                                            const std::vector<std::span<const uint16_t>>& tables,
                                            std::string_view label = "codebook");

  // The 8 coordinates of `code` (< 2^k): sub_cb_0[idx_0] ‖ sub_cb_1[idx_1] ‖ ...
  void lookup(uint64_t code, float out[kVecDim]) const;
};

// Bytes of one packed row: (in / 256) · type_size. Precondition: in % 256 == 0.
inline int64_t row_bytes(const Rung& r, int64_t in) { return in / kSuperblock * r.type_size(); }

// ---- decode (inputs assumed checked: planes by check_scale_planes, fp8 scale finite and > 0) ----

// One fp4 superblock (index stream + plane) -> 256 BF16 weights.
void decode_superblock_fp4(const Rung& r, const Codebook& cb, const uint8_t* sb,
                           uint16_t out_bf16[kSuperblock]);
// One fp8 superblock (index stream only) with its row's FP32 scale -> 256 BF16 weights.
void decode_superblock_fp8(const Rung& r, const Codebook& cb, const uint8_t* sb, float row_scale,
                           uint16_t out_bf16[kSuperblock]);
// A packed row of `in` weights (in % 256 == 0). fp8_row_scale is ignored for fp4 rungs. Reads only the row's
// bytes (no slack needed).
void decode_row(const Rung& r, const Codebook& cb, const uint8_t* row, int64_t in, float fp8_row_scale,
                uint16_t* out_bf16 /*[in]*/);

// Checks fp8 per-row scales: finite and > 0.
Status check_fp8_row_scales(std::span<const float> weight_scale, std::string_view tensor);

// Decodes a whole CB tensor after validating it: `shape` is the cb_qweight shape, [rows, (in/256)·ts] or
// stacked [E, rows, (in/256)·ts]; `weight_scale` is fp8's F32 [rows] / [E, rows] (empty for fp4); `out` is
// BF16 [rows, in] / [E, rows, in]. Refuses in % 256 != 0, a byte dimension that does not match the rung's
// type_size, size mismatches, bad scale planes and bad fp8 scales, naming `tensor` and the rule.
Status decode_tensor(const Rung& r, const Codebook& cb, std::string_view tensor,
                     std::span<const uint8_t> qweight, std::span<const int64_t> shape, int64_t in,
                     std::span<const float> weight_scale, std::span<uint16_t> out);

// ---- encode (deterministic: same inputs -> same bytes) ----

// fp4 v1: 32 codes and 16 E4M3 scale bytes -> type_size bytes at sb. Refuses NaN/negative scale bytes and
// codes >= 2^k.
Status encode_superblock_fp4_v1(const Rung& r, std::span<const uint64_t> codes,
                                const uint8_t scales_e4m3[kFp4Groups], uint8_t* sb);
// fp4 v2: 32 codes, the super exponent and 16 group codes -> type_size bytes. Refuses illegal (E, c) pairs.
Status encode_superblock_fp4_v2(const Rung& r, std::span<const uint64_t> codes, uint8_t E,
                                const uint8_t c[kFp4Groups], uint8_t* sb);
// fp8: 32 codes -> 4k bytes (the row scale is stored in the separate weight_scale tensor).
Status encode_superblock_fp8(const Rung& r, std::span<const uint64_t> codes, uint8_t* sb);

}  // namespace gridq::gridbook

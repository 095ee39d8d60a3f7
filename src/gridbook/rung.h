// A rung is one gridbook storage format: value grid, codeword mode, index width k and (fp4) scale coding
// version. Everything about the byte layout of a superblock follows from it (format.md §3-§5).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gridq::gridbook {

enum class Grid { FP4, FP8 };
enum class Mode { Product, Signed, Full };

inline constexpr int kSuperblock = 256;  // weights per superblock
inline constexpr int kVecDim = 8;        // weights per codeword
inline constexpr int kCodewords = 32;    // codewords per superblock
inline constexpr int kFp4Group = 16;     // weights per fp4 scale group
inline constexpr int kFp4Groups = 16;    // scale groups per superblock
inline constexpr int kMaxSub = 4;        // most sub-tables of any product rung (fp8)

struct Rung {
  Grid grid = Grid::FP4;
  Mode mode = Mode::Product;
  int k = 16;
  int layout_version = 2;  // fp4: 1 = v1 (16 E4M3 bytes), 2 = v2 two-tier (9 bytes); fp8: always 1

  int n_sub() const;                         // fp4 product 2, fp8 product 4, signed/full 1
  int sub_dim() const;                       // 8 / n_sub
  int plane_bytes() const;                   // fp4 v1 16, fp4 v2 9, fp8 0
  int index_bytes() const { return 4 * k; }  // 32 codewords · k bits
  int type_size() const;                     // bytes per superblock = 4k + plane_bytes
  std::string name() const;                  // "NVFP4_CB_K16", "NVFP4_CB_S16", "FP8_CB_K32"
  double bits_per_weight() const;            // type_size · 8 / 256 (fp8 excludes the per-row FP32 scale)
  bool operator==(const Rung&) const = default;
};

// Parses a rung name (NVFP4_CB_K{k}, NVFP4_CB_S{k}, FP8_CB_K{k}). `layout_version` is the artifact's fp4
// scale coding (1 or 2); fp8 rungs have no scale plane and are always layout 1 whatever is passed. The result
// is also checked with validate_rung, so an unimplemented mode or an out-of-range k is refused here.
Expected<Rung> parse_rung_name(std::string_view name, int layout_version);

// k in the family's range (fp4 12..24, fp8 28..48), layout 1|2 for fp4 and 1 for fp8, mode implemented.
// gridq implements product mode only; signed and full are refused with a message that says so.
Status validate_rung(const Rung& r);

// Sub-index widths: part i has width floor(k/n) + (1 if i < k mod n) — wider parts first (format.md §5).
std::vector<int> bit_split(int k, int n);
// Bit offset of each sub-index inside the code: off_i = sum_{j<i} b_j (sub-index 0 in the low bits).
std::vector<int> bit_offsets(int k, int n);

// Fixed-size form of the split for hot loops (no allocation).
struct SubSplit {
  int n = 0;
  int width[kMaxSub] = {0, 0, 0, 0};
  int offset[kMaxSub] = {0, 0, 0, 0};
};
SubSplit sub_split(const Rung& r);

}  // namespace gridq::gridbook

// Lossless load-time re-layout of weight bytes into the tile order the CUDA GEMV kernels stream
// (format.md §7 allows permuting packed bytes at load; the same bytes stay resident, nothing is expanded).
//
// Every format is cut into "units" of 16 output rows × a K-slice; units of one 16-row tile are consecutive,
// tiles follow in row order: [rows/16][in/unit_k][unit_bytes]. Inside a unit the bytes sit in the order in
// which lane l = 4g + t of a warp loads them (g = lane/4 picks rows g and g+8 of the tile, "half" h = 0/1),
// so every warp-wide load instruction reads contiguous bytes.
//
//  BF16 (unit_k 64, 2048 B):   piece i = 2h + p at [i][lane][16 B] = row g+8h, K [16t + 8p, +8)
//  FP8  (unit_k 64, 1024 B):   piece h at [h][lane][16 B]          = row g+8h, K [16t, +16)
//  NVFP4-CB K{k} v1/v2 (unit = one 256-weight superblock, 16 × type_size bytes):
//    lane (g,t), half h owns canonical index bytes [t·k, (t+1)·k) of row g+8h's superblock (codewords
//    8t..8t+7, i.e. weights 64t..64t+63). That k-byte record is split into k/16 16-byte pieces at
//    [p][h][lane][16] and (k%16)/4 4-byte pieces after them at [q][h][lane][4].
//    Then the scale plane: v2: [h][lane] 2 code bytes (plane bytes 1+2t, 2+2t of row g+8h: groups 4t..4t+3),
//    followed by the 16 super exponents E[row] (row = 8h + g); v1: [h][lane] 4 E4M3 bytes (plane bytes
//    4t..4t+3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace gridq::cuda {

inline constexpr int kTileRows = 16;
inline constexpr int kDenseUnitK = 64;

// Bytes of one CB unit (16 rows × one superblock): 16 · type_size.
int cb_unit_bytes(int k, int layout_version);

// canonical: [rows, (in/256)·type_size] as on disk. Refuses rows % 16, in % 256, odd k, k outside 12..24,
// a size mismatch. Returns [rows/16][in/256][cb_unit_bytes].
Expected<std::vector<uint8_t>> cb_relayout(int k, int layout_version, int rows, int in,
                                           std::span<const uint8_t> canonical);
Expected<std::vector<uint8_t>> cb_relayout_inverse(int k, int layout_version, int rows, int in,
                                                   std::span<const uint8_t> tiled);

// FP8 E4M3 [rows, in] and BF16 [rows, in] (uint16 bits). Refuse rows % 16 or in % 64.
Expected<std::vector<uint8_t>> fp8_relayout(int rows, int in, std::span<const uint8_t> canonical);
Expected<std::vector<uint8_t>> fp8_relayout_inverse(int rows, int in, std::span<const uint8_t> tiled);
Expected<std::vector<uint16_t>> bf16_relayout(int rows, int in, std::span<const uint16_t> canonical);
Expected<std::vector<uint16_t>> bf16_relayout_inverse(int rows, int in, std::span<const uint16_t> tiled);

}  // namespace gridq::cuda

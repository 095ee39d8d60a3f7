// Fixed lattice codebooks (quantizer.md §3): each product sub-table comes from Lloyd's algorithm with grid
// snapping on seeded samples drawn from the distribution the encoder sees, so the tables are a pure function
// of (grid, sub-index width, sub-vector dimension) and rebuild byte for byte anywhere.
//
// Samples. FP4 (E2M1, 4-vectors): Gaussian groups of 16 divided by their scale amax/6 (|x| <= 6), cut into
// 4-vectors. FP8 (E4M3, 2-vectors): Gaussian rows of 1024 divided by their row scale amax/448, cut into
// 2-vectors (the row length is our choice; quantizer.md names none for FP8). m = max(2^17, 16·K) samples.
//
// Lloyd's. Start from the first K samples whose snapped values are distinct; 12 iterations of: assign every
// sample to its nearest entry (Euclidean, ties to the lowest index), move each entry to the mean of its
// samples, snap each coordinate to the nearest grid value (ties to the smaller magnitude); an entry that got
// no samples or duplicates an earlier entry is reseeded with the snapped worst-fit sample (largest distance
// to its entry, ties to the lowest sample index) that is not already in the table. Finally sort the entries
// lexicographically. Everything runs in float64 with a fixed summation order; the nearest search is exact
// (pruned by the sorted first coordinate, same answer as brute force), so the thread count does not matter.
//
// Sub-tables of equal shape are identical (the seed depends only on grid, width and dimension): sub0 and sub1
// of NVFP4_CB_K16 are the same 256 x 4 table. Built tables are cached per process.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/rung.h"

namespace gridq::quant {

struct LatticeParams {
  int iterations = 12;
  int64_t min_samples = int64_t{1} << 17;  // m = max(min_samples, 16·K)
  int fp4_group = 16;                      // FP4 samples: group length of the amax/6 scale
  int fp8_row = 1024;                      // FP8 samples: row length of the amax/448 scale
};

// One sub-table [2^bits, dim] row-major, values on the grid, distinct, sorted lexicographically.
// Precondition: 1 <= bits <= 16, dim in {1, 2, 4, 8}. Not cached.
std::vector<float> build_lattice_table(gridbook::Grid grid, int bits, int dim, const LatticeParams& p = {});

// The same table with the default parameters, built once per process (thread-safe).
const std::vector<float>& lattice_table(gridbook::Grid grid, int bits, int dim);

// The lattice book of a product rung (FP4 K12..24, FP8 K28..48): one lattice_table per sub-index width.
Expected<gridbook::Codebook> lattice_codebook(const gridbook::Rung& rung);

}  // namespace gridq::quant

// The value grids of gridbook codebooks as plain number lists, and snapping onto them. Lattice building and
// the scalar (step-1) GPTQ tables both need "the nearest grid value" with a fixed tie rule.
#pragma once

#include <span>
#include <vector>

#include "gridbook/rung.h"

namespace gridq::quant {

// Non-negative magnitudes in ascending order. E2M1: {0, 0.5, 1, 1.5, 2, 3, 4, 6} (8 values);
// E4M3: 0 and the 126 positive finite values up to 448 (127 values).
std::span<const float> grid_magnitudes(gridbook::Grid grid);

// Largest finite magnitude of the grid (6 or 448).
float grid_max(gridbook::Grid grid);

// Nearest grid value to x; exact ties go to the smaller magnitude; |x| beyond the largest magnitude
// saturates. Zero is returned as +0 so tables never carry −0 (it would change the FP16 bytes and the table
// digest).
float snap_to_grid(double x, std::span<const float> magnitudes);

// Every grid value once, ascending (−max … −min, 0, min … max): 15 values for E2M1, 253 for E4M3.
std::vector<float> signed_grid_values(gridbook::Grid grid);

}  // namespace gridq::quant

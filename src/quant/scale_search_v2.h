// Scale search for CB rungs (quantizer.md §4): the two-tier v2 search for NVFP4-CB superblocks and the
// per-row FP32 scale sweep for FP8-CB rows. Both score a candidate scale s through moments, so no re-division
// or new nearest search is needed per candidate: for a sub-vector v (columns J_v), table entry k and
// importance q,
//   A_vk = Σ_j q_j t_kj²,  B_vk = Σ_j q_j w_j t_kj,  C_v = Σ_j q_j w_j²,
//   err_v(s) = C_v + min_k (s²·A_vk − 2s·B_vk)       (first minimum in ascending k)
// and a group's error is the sum over its sub-vectors in column order. Everything is float64 with fixed loop
// and summation orders; rows are independent (OpenMP over rows), so results do not depend on the thread
// count.
//
// Importance q (imatrix, diag(H)/n) must be finite and >= 0. Where a scale group (FP4: 16 columns; FP8: the
// whole row) has Σ q = 0 the search uses q = 1 over that group instead (our reconstruction: a never-activated
// group still gets a sane scale; its output error is zero either way).
#pragma once

#include <cstdint>

#include "gridbook/scale_coding.h"
#include "quant/dense_book.h"

namespace gridq::quant {

struct TwoTierOptions {
  int pilot_rows = 256;  // rows of the pilot sweep that measures m2
  int refits = 2;        // least-squares refits per group
  int max_window = 14;   // most exponents E tried per superblock
};

// Pilot (§4 step 1): encodes the first min(R, pilot_rows) rows group by group with the 16 candidates
// s = e4m3(amax_g / L), L = linspace(6, 4, 16) (first minimum wins), and returns m2 = Σ q·t² / Σ q over the
// grid values of the chosen entries. W: [R, C] row stride ld; q: [C]. Returns 1.0 when every pilot group is
// all-zero (no grid value is used; our choice, the window is padded an octave either way).
double pilot_m2(const double* W, int64_t ld, int R, int C, const float* q, const DenseBook& book,
                const TwoTierOptions& opt = {});

// One superblock column range for rows [0, R): W points at that superblock's first weight of row 0 (row
// stride ld), q at its 256 importances. Writes the chosen plane of every row and, when sub_idx is not null,
// the q-weighted nearest entry of every sub-vector at the chosen group scales ([R, 256 / sub_dim]).
// Rules (§4 steps 2-6): analytic s0_g; exponent window clipped to [117, 135] and capped at max_window values
// nearest ⌊log2 median s0⌋+127 (lower median; ties to the lower E); E = first argmin of the superblock error;
// c_g = first argmin over legal c; all-zero group -> lowest legal c; all-zero superblock -> E = 118, c = 0;
// refits snap s* = Σqtw/Σqt² to the nearest legal scale of E (ties to the larger) and keep it only if the
// group error strictly drops.
void two_tier_search_superblock(const double* W, int64_t ld, int R, const float* q, const DenseBook& book,
                                double m2, const TwoTierOptions& opt, gridbook::V2Plane* planes,
                                uint32_t* sub_idx);

// FP8-CB per-row scale (§4 last paragraph): candidates s = fl32(amax_r / L), L = linspace(448, 448·4/6, 16),
// first minimum of the row error, then `refits` unsnapped least-squares refits kept only on a strict drop.
// An all-zero row gets s = 1. W: [R, C] row stride ld; q: [C]; scale: [R].
void fp8cb_row_scales(const double* W, int64_t ld, int R, int C, const float* q, const DenseBook& book,
                      int refits, float* scale);

// The q-weighted nearest entry of each sub-vector of one row segment at a fixed scale per sub-vector:
// w: [n_sub_vectors · sub_dim] starting at a codeword boundary, scales: [n_sub_vectors], out:
// [n_sub_vectors].
void nearest_entries(const double* w, const double* q, int n_vectors, const double* scales,
                     const DenseBook& book, uint32_t* out);

// The same by scanning every table entry (what nearest_entries, and every search in this file, must equal
// bit for bit: they skip only entries that provably cannot reach the minimum). For tests.
void nearest_entries_exhaustive(const double* w, const double* q, int n_vectors, const double* scales,
                                const DenseBook& book, uint32_t* out);

}  // namespace gridq::quant

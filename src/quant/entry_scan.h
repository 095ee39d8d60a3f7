// The CB encoders' scan of one sub-book (quantizer.md §4): min_k (s²·A_k − 2s·B_k) and its first minimising k
// over all K entries, and the dot products that make B. best_entry_all is the definition (a product, a
// product, a difference per entry, no FMA; the lowest k among equal values); best_entry_scan and entry_dots
// compute the same bits eight entries per AVX-512 instruction where the CPU has it (compiled with fp-contract
// off).
#pragma once

namespace gridq::quant {

// The definition, entry by entry: the oracle the searches and the vector forms are tested against.
double best_entry_all(const double* A, const double* B, int K, double s, int* arg);
// best_entry_all's result and argmin, eight entries at a time where it can (K % 8 == 0, AVX-512).
double best_entry_scan(const double* A, const double* B, int K, double s, int* arg);
// out[k] = ((0 + Tt[0·K + k]·b[0]) + Tt[1·K + k]·b[1]) + … for k < K: entry k of a transposed [d, K] table
// dotted with b, i ascending (eight entries at a time where it can).
void entry_dots(const double* Tt, int K, int d, const double* b, double* out);

}  // namespace gridq::quant

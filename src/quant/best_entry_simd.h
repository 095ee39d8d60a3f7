// min_k (s²·A_k − 2s·B_k) and its first minimising k over all K entries, eight at a time on AVX-512: the
// same products and difference per entry as the scalar loop (no FMA: compiled with fp-contract off) and the
// same tie rule (lowest k among equal values), so the same bits (scale_search_v2.cpp's best_entry_all).
#pragma once

namespace gridq::quant {

// Whether best_entry_all_avx512 may run (AVX-512F on this CPU). Fixed at start-up.
bool have_best_entry_avx512();
// Needs K % 8 == 0 and have_best_entry_avx512().
double best_entry_all_avx512(const double* A, const double* B, int K, double s, int* arg);
// out[k] = ((0 + Tt[0·K + k]·b[0]) + Tt[1·K + k]·b[1]) + … for k < K (a transposed [d, K] table: the scalar
// loop `dot = 0; dot += t_ki·b_i` over i ascending, eight entries at a time, the same bits). Needs K % 8 ==
// 0.
void dots_avx512(const double* Tt, int K, int d, const double* b, double* out);

}  // namespace gridq::quant

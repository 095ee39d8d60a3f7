// Internal interface between the GPU CB-GPTQ host side (gptq.cpp) and its kernels (gptq_*.cu). Plain data
// and cudaError_t only (the .cu files never include core/status.h).
//
// Every kernel here mirrors one CPU routine of src/quant with the same float64 operations in the same order
// (the .cu files are compiled with -fmad=false, and the CPU build has no FMA contraction on x86-64), so the
// device encoder gives the CPU encoder's bytes; tests/cuda/test_cb_gptq.cpp holds it to that.
//
// Shapes: M matrices [R, C] of one batch; nH Hessians [C, C]; matrix m uses Hessian h_of[m] (gate and up of
// an expert share theirs). Books are NVFP4 product rungs with two sub-tables of K entries of 4 values.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gridq::cuda::gptq {

inline constexpr int kSB = 256;         // superblock = GPTQ block (columns)
inline constexpr int kGroup = 16;       // columns per scale group
inline constexpr int kSubDim = 4;       // columns per sub-vector slab
inline constexpr int kPanel = 32;       // factorization panel width
inline constexpr int kPlaneBytes = 17;  // a row's plane per superblock: E, then the 16 group codes
inline constexpr int kEMin = 117;       // two-tier exponent range
inline constexpr int kEMax = 135;
inline constexpr int kNE = kEMax - kEMin + 1;
inline constexpr int kMaxScales = 128;  // distinct scales of any exponent window of <= 15 exponents

// The v2 scale code tables and, per exponent window [lo, hi], its distinct legal scales ascending and the
// position of each (E, c) in that list (quant/scale_search_v2.cpp builds the list per row; here it is a
// lookup). All device pointers.
struct V2Tables {
  const float* scale;      // [256 · 16] v2_scale(E, c)
  const uint8_t* legal;    // [256 · 16]
  const int8_t* lowest;    // [256] lowest legal code of E (-1: none)
  const double* win;       // [kNE · kNE · kMaxScales] window (lo, hi) → its scales, ascending
  const int16_t* win_n;    // [kNE · kNE]
  const int16_t* win_idx;  // [kNE · kNE · kNE · 16] (lo, hi, E, c) → index in the window list, -1 outside
  const float* e4m3;       // [256] e4m3 byte → value
};

// ---- factorization (quant/hessian_factor.cpp) ----
// H [nH, C, C] fp32 (lower triangle read) → L [nH, C, C] float64: damped copy, mean diag, flags.
//   identity[h] = 1 when n_tokens[h] == 0 or mean diag == 0; bad[h] = 1 when an entry is not finite,
//   2 when mean diag < 0.
cudaError_t raw_factor_init(const float* H, int nH, int C, const long long* n_tokens, const double* damp,
                            double* L, double* mean /*[nH]*/, uint8_t* identity, uint8_t* bad,
                            cudaStream_t s);
// In-place lower Cholesky of A [nH, C, C] (the CPU's left-looking order, blocked); fail[h] = 1 on a
// non-positive pivot. active[h] = 0 skips a matrix.
cudaError_t raw_cholesky(double* A, int nH, int C, const uint8_t* active, uint8_t* fail, cudaStream_t s);
// Li = L⁻¹ (lower) into Li (which the caller has zeroed), then Hinv = Li ᵀ·Li (lower) into L.
cudaError_t raw_inverse_gram(double* L, double* Li, int nH, int C, const uint8_t* active, cudaStream_t s);
// U [C, C] upper = transpose of the lower factor in A, written to U (zero below the diagonal).
cudaError_t raw_upper_from_lower(const double* A, double* U, int nH, int C, const uint8_t* active,
                                 cudaStream_t s);

// ---- scales (quant/scale_search_v2.cpp) ----
// Per matrix m: m2[m] = pilot_m2 over its first `rows` rows. W [M, R, C] float64; q [nH, C] fp32.
cudaError_t raw_pilot_m2(const double* W, int M, int R, int C, int rows, const int* h_of, const float* q,
                         const double* book, int K, V2Tables t, double* numden /*[M, rows, 2]*/, double* m2,
                         cudaStream_t s);
// Two-tier v2 search of superblock b for every row of every matrix: planes [M, R, C/256, 17] (E, 16 c);
// sub_idx [M, R, C/4] (entries of this superblock written) may be null.
cudaError_t raw_two_tier(const double* W, int M, int R, int C, int b, const int* h_of, const float* q,
                         const double* m2, const double* book, int K, V2Tables t, int max_window, int refits,
                         uint8_t* planes, uint32_t* sub_idx, cudaStream_t s);

// ---- CB-GPTQ block (quant/cb_gptq.cpp gptq_core) ----
// Step tables of block b per Hessian: A = U_SS⁻¹ [64, 16], T' = T·A [64, K, 4], ‖T'‖² [64, K].
cudaError_t raw_step_tables(const double* U, int nH, int C, int b, const uint8_t* identity,
                            const double* book, int K, double* A, double* Tp, double* nk, cudaStream_t s);
// The 64 slab steps of block b for every row: W [M, R, C] compensated in place inside the block; Err
// [M, R, 256]; sub_idx [M, R, C/4].
cudaError_t raw_gptq_block(double* W, int M, int R, int C, int b, const int* h_of, const uint8_t* identity,
                           const double* U, const double* A, const double* Tp, const double* nk,
                           const double* book, int K, const uint8_t* planes, V2Tables t, double* Err,
                           uint32_t* sub_idx, cudaStream_t s);
// ---- the FP8 formats' GPTQ (gptq_fp8.cu): one fixed scale per row ----
// Sub-tables of sub_dim-vectors, quant::DenseBook's layout: FP8_DYNAMIC's grid (one table of the 253 signed
// E4M3 values, sub_dim 1, decoded t·s) or an FP8-CB product rung (four tables of 2-vectors, decoded
// bf16_rn(fl32(t)·s)). Device pointers.
struct ScalarTables {
  const double* t = nullptr;     // every sub-table in order, [Σ entries, sub_dim]
  const int* off = nullptr;      // [n_sub] the first value of each sub-table in t
  const int* entries = nullptr;  // [n_sub]
  int n_sub = 0, sub_dim = 0;
  bool bf16_decode = false;
};
// The slabs of block b for every row: the nearest entry of slab v's sub-table (v mod n_sub) to w / scale[row]
// in the transformed space; Err [M, R, 256], idx [M, R, C / sub_dim]. cudaErrorNotSupported for other
// (sub_dim, decode) pairs than (1, t·s) and (2, bf16). The trailing update is raw_gptq_trailing's.
cudaError_t raw_scalar_gptq_block(double* W, int M, int R, int C, int b, const int* h_of,
                                  const uint8_t* identity, const double* U, const ScalarTables& tab,
                                  const double* scale, double* Err, uint16_t* idx, cudaStream_t s);
// W[:, b1:] −= Err · U[B, b1:] per matrix (skipped for identity Hessians).
cudaError_t raw_gptq_trailing(double* W, int M, int R, int C, int b, const int* h_of, const uint8_t* identity,
                              const double* U, const double* Err, cudaStream_t s);

// ---- refinement (quant/cb_refine.cpp) ----
// Hd = H + damp·tr/C·I [nH, C, C] float64, entry norms nk [nH, C/4, K], cold[h] = tr(H) <= 0; damp [nH]
// is overwritten with λ.
cudaError_t raw_refine_prepare(const float* H, int nH, int C, double* damp, const double* book, int K,
                               double* Hd, double* nk, uint8_t* cold, cudaStream_t s);
// ŵ and e = w − ŵ [M, R, C] from indices and planes.
cudaError_t raw_refine_decode(const float* W, long long n, int C, const uint32_t* sub_idx,
                              const uint8_t* planes, const double* book, int K, V2Tables t, double* wh,
                              double* e, cudaStream_t s);
// g = Hd·e per row and f = e·g [M, R].
cudaError_t raw_refine_objective(const double* Hd, const double* e, int M, int R, int C, const int* h_of,
                                 double* g, double* f, cudaStream_t s);
// The codes / scales passes of every row (skip[m]: leave matrix m alone); stats [M, R, 3] = rounds, code and
// scale changes. sub_idx and planes are refined in place.
cudaError_t raw_refine_rows(const float* W, int M, int R, int C, const int* h_of, const uint8_t* skip,
                            const double* Hd, const double* nk, const double* book, int K, V2Tables t,
                            int passes, int scales, double* wh, double* e, double* g, uint32_t* sub_idx,
                            uint8_t* planes, int* stats, cudaStream_t s);

// H [nH, C, C]: lower triangle := upper (in place); q [nH, C] = diag(H) / n (0 where n = 0).
cudaError_t raw_mirror_imatrix(float* H, int nH, int C, const long long* n, float* q, cudaStream_t s);
// fp32 [n] → float64 [n].
cudaError_t raw_widen(const float* x, long long n, double* y, cudaStream_t s);

// ---- output proxy (quant/output_proxy.cpp: output_half_trace) ----
// d = double(W_hat) − double(W) per element; V [R, C] float64: V[r, j] = Σ_i d[r, i] · H[i, j], i ascending,
// terms with d[r, i] == 0 skipped (as the CPU loop). half [R] = 0.5 · Σ_j d[r, j] · V[r, j] (j ascending),
// *total = Σ_r half[r] (r ascending). W, W_hat [R, C] and H [C, C] fp32, all finite (the caller checks).
cudaError_t raw_output_half_trace(const float* W, const float* W_hat, const float* H, int R, int C, double* V,
                                  double* half, double* total, cudaStream_t s);

// The same from e = W − W_hat [R, C] float64 (refine_decode's): ΔW = −e, the same doubles.
cudaError_t raw_output_half_trace_err(const double* e, const float* H, int R, int C, double* V, double* half,
                                      double* total, cudaStream_t s);

// ---- holdout output-MSE (quant/cb_gptq.cpp: holdout_output_mse) ----
// acc [M, R]: acc[m, r] = Σ_t (Σ_j e[m, r, j]·x[t, j])², j and t ascending, over the n_hold[h] rows of X
// starting at row x_row0[h] (h = h_of[m]; X [Σ n_hold, C] fp32). e = W − Ŵ [M, R, C] float64. Y2 [M, R,
// t_max] scratch (t_max ≥ every n_hold, > 0). Rows of a matrix whose input has no holdout rows get acc 0.
cudaError_t raw_holdout_rows(const double* e, int M, int R, int C, const int* h_of, const float* X,
                             const long long* x_row0, const int* n_hold, int t_max, double* Y2, double* acc,
                             cudaStream_t s);

}  // namespace gridq::cuda::gptq

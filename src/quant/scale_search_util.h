// The two-tier scale search's helpers (scale_search_v2.cpp: NVFP4-CB v2 superblocks, scale_search_fp8cb.cpp:
// FP8-CB row scales): entry scans, moments, importances, E4M3 rounding. Inline: they sit in the inner loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/numerics.h"
#include "gridbook/rung.h"
#include "quant/dense_book.h"
#include "quant/entry_scan.h"

namespace gridq::quant::scale_search_detail {

constexpr int kSB = gridbook::kSuperblock;
constexpr int kG = gridbook::kFp4Group;
constexpr int kNG = gridbook::kFp4Groups;
constexpr uint8_t kEMin = 117;
constexpr uint8_t kEMax = 135;

// min_k (s²·A_k − 2s·B_k), the s-dependent part of err_v(s), and its first minimising k (entry_scan.h's
// best_entry_all), skipping entries that provably cannot reach it. The value of entry k is
// s²A_k − 2sB_k = Σ_j q_j (s·t_kj − w_j)² − C_v (C_v = Σ_j q_j w_j²), so q_0 (s·t_k0 − w_0)² − C_v is a lower
// bound that grows with |t_k0 − w_0/s|. Entries are visited outward from w_0/s in order of their first
// coordinate and a side stops once its bound exceeds the best value so far by far more than rounding can
// explain (relative 1e-9; the computed values carry ~1e-15). Visited entries use the exact expression of
// best_entry_all and its tie rule (lowest k among equal values), so the result is the same bits. For the
// large tables (K20: 1,024 entries, K24: 4,096) this visits a small fraction of them; tables of up to 256
// entries are scanned whole (best_entry_scan: the same bits again, eight entries at a time, faster there).
inline double best_entry(const double* A, const double* B, const DenseBook& book, int sub, double s,
                         double w0, double q0, double Cv, int* arg) {
  const int K = book.entries[sub];
  if (K <= 256 || !(q0 > 0.0) || book.by_first.empty()) return best_entry_scan(A, B, K, s, arg);
  const std::vector<int>& order = book.by_first[sub];
  const std::vector<double>& first = book.first[sub];
  const double s2 = s * s;
  const double ts = 2.0 * s;
  double best = std::numeric_limits<double>::infinity();
  int bi = K;
  auto visit = [&](int pos) {
    const int k = order[size_t(pos)];
    const double v = s2 * A[k] - ts * B[k];
    if (v < best || (v == best && k < bi)) {
      best = v;
      bi = k;
    }
  };
  auto beyond = [&](int pos) {  // true when no entry at or past pos on this side can reach `best`
    const double r = s * first[size_t(pos)] - w0;
    const double lb = q0 * r * r - Cv;
    return lb - 1e-9 * (std::fabs(lb) + Cv) > best + 1e-9 * std::fabs(best);
  };
  const int start = static_cast<int>(std::lower_bound(first.begin(), first.end(), w0 / s) - first.begin());
  for (int pos = start; pos < K && !beyond(pos); ++pos) visit(pos);
  for (int pos = start - 1; pos >= 0 && !beyond(pos); --pos) visit(pos);
  if (arg) *arg = bi;
  return best;
}

// Σ_j q_j w_j² of one sub-vector.
inline double sub_c(const double* w, const double* q, int d) {
  double c = 0.0;
  for (int j = 0; j < d; ++j) c += q[j] * w[j] * w[j];
  return c;
}

// A_k = Σ_j q_j t_kj² and B_k = Σ_j q_j w_j t_kj for one sub-vector (j in column order).
inline void moments(const double* w, const double* q, const DenseBook& book, int sub, double* A, double* B) {
  const int K = book.entries[sub];
  const int d = book.sub_dim;
  const double* t = book.t[sub].data();
  for (int k = 0; k < K; ++k) {
    double a = 0.0, b = 0.0;
    for (int j = 0; j < d; ++j) {
      const double tk = t[size_t(k) * d + j];
      a += q[j] * tk * tk;
      b += q[j] * w[j] * tk;
    }
    if (A) A[k] = a;
    B[k] = b;
  }
}

// Effective importances of a run of n columns: q itself, or all ones if it sums to zero.
inline void effective_q(const float* q, int n, double* out) {
  double s = 0.0;
  for (int j = 0; j < n; ++j) s += q[j];
  for (int j = 0; j < n; ++j) out[j] = s > 0.0 ? static_cast<double>(q[j]) : 1.0;
}

// floor(log2 x) and ceil(log2 x) for finite x > 0, exactly (frexp is exact).
inline int floor_log2(double x) {
  int e = 0;
  std::frexp(x, &e);
  return e - 1;
}
inline int ceil_log2(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);
  return m == 0.5 ? e - 1 : e;
}

inline double e4m3_round(double v) { return e4m3_to_f32(f32_to_e4m3_rne(static_cast<float>(v))); }

inline int max_entries(const DenseBook& book) {
  return *std::max_element(book.entries.begin(), book.entries.end());
}

}  // namespace gridq::quant::scale_search_detail

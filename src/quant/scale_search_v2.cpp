#include "quant/scale_search_v2.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/numerics.h"
#include "gridbook/rung.h"
#include "quant/entry_scan.h"

namespace gridq::quant {
namespace {

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

int max_entries(const DenseBook& book) { return *std::max_element(book.entries.begin(), book.entries.end()); }

}  // namespace

namespace {
void nearest_entries_impl(const double* w, const double* q, int n_vectors, const double* scales,
                          const DenseBook& book, bool exhaustive, uint32_t* out) {
  std::vector<double> A(max_entries(book)), B(max_entries(book));
  const int d = book.sub_dim;
  for (int v = 0; v < n_vectors; ++v) {
    const int sub = v % book.n_sub;
    const double* wv = w + size_t(v) * d;
    const double* qv = q + size_t(v) * d;
    moments(wv, qv, book, sub, A.data(), B.data());
    int k = 0;
    if (exhaustive)
      best_entry_all(A.data(), B.data(), book.entries[sub], scales[v], &k);
    else
      best_entry(A.data(), B.data(), book, sub, scales[v], wv[0], qv[0], sub_c(wv, qv, d), &k);
    out[v] = static_cast<uint32_t>(k);
  }
}
}  // namespace

void nearest_entries(const double* w, const double* q, int n_vectors, const double* scales,
                     const DenseBook& book, uint32_t* out) {
  nearest_entries_impl(w, q, n_vectors, scales, book, false, out);
}

void nearest_entries_exhaustive(const double* w, const double* q, int n_vectors, const double* scales,
                                const DenseBook& book, uint32_t* out) {
  nearest_entries_impl(w, q, n_vectors, scales, book, true, out);
}

double pilot_m2(const double* W, int64_t ld, int R, int C, const float* q, const DenseBook& book,
                const TwoTierOptions& opt) {
  const int rows = std::min(R, opt.pilot_rows);
  const int d = book.sub_dim;
  const int vpg = kG / d;  // sub-vectors per group
  const int n_groups = C / kG;
  double L[16];
  for (int i = 0; i < 16; ++i) L[i] = 6.0 - 2.0 * i / 15.0;
  // Per-row partial sums, reduced in row order afterwards (thread-count independent).
  std::vector<double> num(rows, 0.0), den(rows, 0.0);
#pragma omp parallel
  {
    const int K = max_entries(book);
    std::vector<double> A(size_t(vpg) * K), B(size_t(vpg) * K), cv(vpg);
    double qe[kG];
#pragma omp for schedule(static)
    for (int r = 0; r < rows; ++r) {
      for (int g = 0; g < n_groups; ++g) {
        const double* w = W + int64_t(r) * ld + int64_t(g) * kG;
        double amax = 0.0;
        for (int j = 0; j < kG; ++j) amax = std::max(amax, std::fabs(w[j]));
        if (amax == 0.0) continue;
        effective_q(q + size_t(g) * kG, kG, qe);
        for (int v = 0; v < vpg; ++v) {
          moments(w + v * d, qe + v * d, book, (g * vpg + v) % book.n_sub, &A[size_t(v) * K],
                  &B[size_t(v) * K]);
          cv[v] = sub_c(w + v * d, qe + v * d, d);
        }
        auto best_of = [&](int v, double s, int* k) {
          return best_entry(&A[size_t(v) * K], &B[size_t(v) * K], book, (g * vpg + v) % book.n_sub, s,
                            w[v * d], qe[v * d], cv[v], k);
        };
        double best = std::numeric_limits<double>::infinity();
        double best_s = 0.0;
        for (int i = 0; i < 16; ++i) {
          const double s = e4m3_round(amax / L[i]);
          if (s == 0.0) continue;
          double e = 0.0;
          for (int v = 0; v < vpg; ++v) e += best_of(v, s, nullptr);
          if (e < best) {
            best = e;
            best_s = s;
          }
        }
        if (best_s == 0.0) continue;
        for (int v = 0; v < vpg; ++v) {
          const int sub = (g * vpg + v) % book.n_sub;
          int k = 0;
          best_of(v, best_s, &k);
          const double* t = &book.t[sub][size_t(k) * d];
          for (int j = 0; j < d; ++j) {
            num[r] += qe[v * d + j] * t[j] * t[j];
            den[r] += qe[v * d + j];
          }
        }
      }
    }
  }
  double n = 0.0, dd = 0.0;
  for (int r = 0; r < rows; ++r) {
    n += num[r];
    dd += den[r];
  }
  if (!(dd > 0.0) || !(n > 0.0)) return 1.0;
  return n / dd;
}

void two_tier_search_superblock(const double* W, int64_t ld, int R, const float* q, const DenseBook& book,
                                double m2, const TwoTierOptions& opt, gridbook::V2Plane* planes,
                                uint32_t* sub_idx) {
  const int d = book.sub_dim;
  const int nv = kSB / d;  // sub-vectors per superblock
  const int vpg = kG / d;  // sub-vectors per group
  const int K = max_entries(book);

  // Shared by all rows: effective q and A_vk (depends only on the columns and the table).
  double qe[kSB];
  for (int g = 0; g < kNG; ++g) effective_q(q + g * kG, kG, qe + g * kG);
  std::vector<double> A(size_t(nv) * K, 0.0);  // [nv, K]
  {
    std::vector<double> dummy(K);
    std::vector<double> zero(d, 0.0);
    for (int v = 0; v < nv; ++v)
      moments(zero.data(), qe + v * d, book, v % book.n_sub, &A[size_t(v) * K], dummy.data());
  }

  // Legal (E, c) pairs and their scales, computed once.
  static const auto legal = [] {
    std::vector<std::array<bool, 16>> l(256);
    for (int E = 0; E < 256; ++E)
      for (int c = 0; c < 16; ++c) l[E][c] = gridbook::v2_legal(static_cast<uint8_t>(E), c);
    return l;
  }();

#pragma omp parallel
  {
    std::vector<double> B(size_t(nv) * K);
    std::vector<double> Cv(nv);
    std::vector<double> scales;  // distinct candidate scales, ascending
    std::vector<double> eg;      // [16 groups, n_scales]
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      const double* w = W + int64_t(r) * ld;
      gridbook::V2Plane& plane = planes[r];
      bool all_zero = true;
      for (int j = 0; j < kSB; ++j) all_zero = all_zero && w[j] == 0.0;
      for (int v = 0; v < nv; ++v) {
        moments(w + v * d, qe + v * d, book, v % book.n_sub, nullptr, &B[size_t(v) * K]);
        Cv[v] = sub_c(w + v * d, qe + v * d, d);
      }
      auto best_of = [&](int v, double s, int* k) {
        return best_entry(&A[size_t(v) * K], &B[size_t(v) * K], book, v % book.n_sub, s, w[v * d], qe[v * d],
                          Cv[v], k);
      };
      // err of group g at scale s (sub-vectors in column order).
      auto group_err = [&](int g, double s) {
        double e = 0.0;
        for (int v = g * vpg; v < (g + 1) * vpg; ++v) e += Cv[v] + best_of(v, s, nullptr);
        return e;
      };

      if (all_zero) {
        plane.E = gridbook::kV2ZeroSuperblockE;
        plane.c.fill(0);
      } else {
        // Step 2: analytic group scales.
        double s0[kNG];
        std::vector<double> valid;
        bool group_zero[kNG];
        for (int g = 0; g < kNG; ++g) {
          double num = 0.0, den = 0.0;
          bool z = true;
          for (int j = g * kG; j < (g + 1) * kG; ++j) {
            num += qe[j] * w[j] * w[j];
            den += qe[j];
            z = z && w[j] == 0.0;
          }
          group_zero[g] = z;
          s0[g] = std::sqrt(num / (m2 * den));
          if (s0[g] > 0.0 && std::isfinite(s0[g])) valid.push_back(s0[g]);
        }
        // Step 3: exponent window.
        int lo = gridbook::kV2ZeroSuperblockE, hi = gridbook::kV2ZeroSuperblockE;
        if (!valid.empty()) {
          std::vector<double> sorted = valid;
          std::sort(sorted.begin(), sorted.end());
          lo = ceil_log2(sorted.front() / 3.75) + 126;
          hi = floor_log2(1.5 * sorted.back()) + 128;
          lo = std::clamp(lo, int(kEMin), int(kEMax));
          hi = std::clamp(hi, int(kEMin), int(kEMax));
          if (lo > hi) std::swap(lo, hi);  // not reachable for finite s0; keeps the window non-empty
          if (hi - lo + 1 > opt.max_window) {
            const int center = floor_log2(sorted[(sorted.size() - 1) / 2]) + 127;
            std::vector<int> es;
            for (int E = lo; E <= hi; ++E) es.push_back(E);
            std::stable_sort(es.begin(), es.end(),
                             [&](int a, int b) { return std::abs(a - center) < std::abs(b - center); });
            es.resize(opt.max_window);
            lo = *std::min_element(es.begin(), es.end());
            hi = *std::max_element(es.begin(), es.end());
          }
        }
        // Distinct candidate scales of the window.
        scales.clear();
        for (int E = lo; E <= hi; ++E)
          for (int c = 0; c < 16; ++c)
            if (legal[E][c]) scales.push_back(gridbook::v2_scale(static_cast<uint8_t>(E), c));
        std::sort(scales.begin(), scales.end());
        scales.erase(std::unique(scales.begin(), scales.end()), scales.end());
        const int ns = static_cast<int>(scales.size());
        auto scale_index = [&](double s) {
          return static_cast<int>(std::lower_bound(scales.begin(), scales.end(), s) - scales.begin());
        };
        eg.assign(size_t(kNG) * ns, 0.0);
        for (int g = 0; g < kNG; ++g)
          for (int i = 0; i < ns; ++i) eg[size_t(g) * ns + i] = group_err(g, scales[i]);

        // Step 4: E = first argmin of the superblock error.
        double best_total = std::numeric_limits<double>::infinity();
        int best_E = lo;
        for (int E = lo; E <= hi; ++E) {
          double total = 0.0;
          bool any = false;
          for (int g = 0; g < kNG; ++g) {
            double m = std::numeric_limits<double>::infinity();
            for (int c = 0; c < 16; ++c)
              if (legal[E][c]) {
                m = std::min(m, eg[size_t(g) * ns + scale_index(gridbook::v2_scale(uint8_t(E), c))]);
                any = true;
              }
            total += m;
          }
          if (any && total < best_total) {
            best_total = total;
            best_E = E;
          }
        }
        plane.E = static_cast<uint8_t>(best_E);
        // Step 5: each group's code, then step 6 refits.
        const int lowest = gridbook::v2_lowest_legal_code(plane.E);
        for (int g = 0; g < kNG; ++g) {
          if (group_zero[g]) {
            plane.c[g] = static_cast<uint8_t>(lowest);
            continue;
          }
          double best = std::numeric_limits<double>::infinity();
          int bc = lowest;
          for (int c = 0; c < 16; ++c) {
            if (!legal[plane.E][c]) continue;
            const double e = eg[size_t(g) * ns + scale_index(gridbook::v2_scale(plane.E, c))];
            if (e < best) {
              best = e;
              bc = c;
            }
          }
          for (int it = 0; it < opt.refits; ++it) {
            const double s = gridbook::v2_scale(plane.E, bc);
            double num = 0.0, den = 0.0;
            for (int v = g * vpg; v < (g + 1) * vpg; ++v) {
              const int sub = v % book.n_sub;
              int k = 0;
              best_of(v, s, &k);
              const double* t = &book.t[sub][size_t(k) * d];
              for (int j = 0; j < d; ++j) {
                num += qe[v * d + j] * t[j] * w[v * d + j];
                den += qe[v * d + j] * t[j] * t[j];
              }
            }
            if (!(den > 0.0)) break;
            const double star = num / den;
            // Nearest legal scale of E (ties to the larger).
            int nc = -1;
            double nd = std::numeric_limits<double>::infinity();
            for (int c = 0; c < 16; ++c) {
              if (!legal[plane.E][c]) continue;
              const double dist = std::fabs(gridbook::v2_scale(plane.E, c) - star);
              if (dist <= nd) {  // legal scales ascend with c, so "<=" keeps the larger on a tie
                nd = dist;
                nc = c;
              }
            }
            const double e_new = eg[size_t(g) * ns + scale_index(gridbook::v2_scale(plane.E, nc))];
            if (e_new < best) {
              best = e_new;
              bc = nc;
            } else {
              break;  // nothing changed: a further refit would repeat the same computation
            }
          }
          plane.c[g] = static_cast<uint8_t>(bc);
        }
      }

      if (sub_idx) {
        for (int v = 0; v < nv; ++v) {
          const double s = gridbook::v2_scale(plane.E, plane.c[(v * d) / kG]);
          int k = 0;
          best_of(v, s, &k);
          sub_idx[size_t(r) * nv + v] = static_cast<uint32_t>(k);
        }
      }
    }
  }
}

void fp8cb_row_scales(const double* W, int64_t ld, int R, int C, const float* q, const DenseBook& book,
                      int refits, float* scale) {
  const int d = book.sub_dim;
  const int nv = C / d;
  std::vector<double> qe(C);
  effective_q(q, C, qe.data());
  double L[16];
  for (int i = 0; i < 16; ++i) L[i] = 448.0 + (448.0 * 4.0 / 6.0 - 448.0) * i / 15.0;
#pragma omp parallel
  {
    const int K = max_entries(book);
    std::vector<double> A(K), B(K);  // moments of one sub-vector at a time (rows can be long, tables large)
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      const double* w = W + int64_t(r) * ld;
      double amax = 0.0;
      for (int j = 0; j < C; ++j) amax = std::max(amax, std::fabs(w[j]));
      if (amax == 0.0) {
        scale[r] = 1.0f;
        continue;
      }
      double cw = 0.0;
      for (int j = 0; j < C; ++j) cw += qe[j] * w[j] * w[j];
      // Row error at each of n scales, sub-vectors in column order.
      auto row_errs = [&](const double* s, int n, double* e) {
        for (int i = 0; i < n; ++i) e[i] = cw;
        for (int v = 0; v < nv; ++v) {
          const int sub = v % book.n_sub;
          const double* wv = w + v * d;
          const double* qv = qe.data() + v * d;
          moments(wv, qv, book, sub, A.data(), B.data());
          const double cv = sub_c(wv, qv, d);
          for (int i = 0; i < n; ++i)
            e[i] += best_entry(A.data(), B.data(), book, sub, s[i], wv[0], qv[0], cv, nullptr);
        }
      };
      double cand[16], errs[16];
      int nc = 0;
      for (int i = 0; i < 16; ++i) {
        const float s = static_cast<float>(amax / L[i]);
        if (s > 0.0f) cand[nc++] = s;
      }
      row_errs(cand, nc, errs);
      double best = std::numeric_limits<double>::infinity();
      float bs = 1.0f;
      for (int i = 0; i < nc; ++i)
        if (errs[i] < best) {
          best = errs[i];
          bs = static_cast<float>(cand[i]);
        }
      for (int it = 0; it < refits; ++it) {
        double num = 0.0, den = 0.0;
        for (int v = 0; v < nv; ++v) {
          const int sub = v % book.n_sub;
          const double* wv = w + v * d;
          const double* qv = qe.data() + v * d;
          moments(wv, qv, book, sub, A.data(), B.data());
          int k = 0;
          best_entry(A.data(), B.data(), book, sub, bs, wv[0], qv[0], sub_c(wv, qv, d), &k);
          const double* t = &book.t[sub][size_t(k) * d];
          for (int j = 0; j < d; ++j) {
            num += qe[v * d + j] * t[j] * w[v * d + j];
            den += qe[v * d + j] * t[j] * t[j];
          }
        }
        if (!(den > 0.0)) break;
        const float s = static_cast<float>(num / den);
        if (!(s > 0.0f) || !std::isfinite(s)) break;
        const double sd = s;
        double e = 0.0;
        row_errs(&sd, 1, &e);
        if (!(e < best)) break;
        best = e;
        bs = s;
      }
      scale[r] = bs;
    }
  }
}

}  // namespace gridq::quant

#include "quant/scale_search_v2.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "core/numerics.h"
#include "gridbook/rung.h"
#include "quant/entry_scan.h"
#include "quant/scale_search_util.h"

namespace gridq::quant {
using namespace scale_search_detail;  // the search helpers (scale_search_util.h), as before the split

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

}  // namespace gridq::quant

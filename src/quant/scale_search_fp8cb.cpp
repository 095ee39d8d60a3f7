// FP8-CB row scales (scale_search_v2.h): one E4M3 scale per row, searched on the row's moments.
#include <limits>
#include <vector>

#include "quant/scale_search_util.h"
#include "quant/scale_search_v2.h"

namespace gridq::quant {

using namespace scale_search_detail;  // the search helpers (scale_search_util.h), as before the split

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

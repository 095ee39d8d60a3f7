#include "quant/cb_refine.h"

#include <algorithm>

#include "core/numerics.h"
#include "quant/entry_scan.h"

namespace gridq::quant {
namespace {

constexpr int kSB = gridbook::kSuperblock;
constexpr int kG = gridbook::kFp4Group;

// H + λI as float64, λ = damp·mean(diag H); λ_out = 0 and an empty vector when diag H sums to zero.
std::vector<double> damped_h(const float* H, int C, double damp) {
  double tr = 0.0;
  for (int j = 0; j < C; ++j) tr += H[size_t(j) * C + j];
  if (!(tr > 0.0)) return {};
  std::vector<double> Hd(H, H + size_t(C) * C);
  const double lambda = damp * tr / C;
  for (int j = 0; j < C; ++j) Hd[size_t(j) * C + j] += lambda;
  return Hd;
}

// g = Hd·e (Hd symmetric, row-major) and returns e·g.
double gradient(const std::vector<double>& Hd, int C, const double* e, double* g) {
  double f = 0.0;
  for (int j = 0; j < C; ++j) {
    const double* h = &Hd[size_t(j) * C];
    double a = 0.0;
    for (int i = 0; i < C; ++i) a += h[i] * e[i];
    g[j] = a;
    f += a * e[j];
  }
  return f;
}

// The decoded value of table value t at scale s, as decode_fp4 and the gridbook reader produce it.
double decoded(double t, float s) { return static_cast<double>(bf16_round(static_cast<float>(t) * s)); }

}  // namespace

double h_weighted_error(const float* W, const float* W_hat, const float* H, int R, int C, double damp) {
  const std::vector<double> Hd = damped_h(H, C, damp);
  if (Hd.empty()) return 0.0;
  std::vector<double> per_row(R, 0.0);
#pragma omp parallel
  {
    std::vector<double> e(C), g(C);
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < C; ++j)
        e[j] = static_cast<double>(W[size_t(r) * C + j]) - static_cast<double>(W_hat[size_t(r) * C + j]);
      per_row[r] = gradient(Hd, C, e.data(), g.data());
    }
  }
  double f = 0.0;
  for (double v : per_row) f += v;
  return f;
}

Expected<RefineResult> refine_fp4(const gridbook::Codebook& cb, const float* W, const float* H, int R, int C,
                                  const RefineOptions& opt, Fp4CbEncoding& enc) {
  if (cb.rung.grid != gridbook::Grid::FP4 || cb.rung.mode != gridbook::Mode::Product ||
      cb.rung.layout_version != 2)
    return err("refine_fp4: codebook {} is not an NVFP4-CB v2 product rung", cb.rung.name());
  if (R <= 0 || C <= 0 || C % kSB != 0 || enc.rows != R || enc.cols != C ||
      enc.w_hat.size() != size_t(R) * C || enc.planes.size() != size_t(R) * (C / kSB) ||
      enc.codes.size() != size_t(R) * (C / gridbook::kVecDim))
    return err("refine_fp4: encoding [{}, {}] does not match the weight [{}, {}]", enc.rows, enc.cols, R, C);
  if (opt.passes < 0) return err("refine_fp4: passes is {}; it must be >= 0", opt.passes);
  RefineResult res;
  const std::vector<double> Hd = damped_h(H, C, opt.damp);
  if (Hd.empty() || opt.passes == 0) return res;  // cold input: every change scores zero

  const DenseBook book = DenseBook::from(cb);
  const int d = book.sub_dim;
  const int ns = book.n_sub;
  const int nv = C / d;  // slabs per row
  const int nsb = C / kSB;
  const int ncw = C / gridbook::kVecDim;
  int maxK = 0;
  for (int K : book.entries) maxK = std::max(maxK, K);

  // Slab tables shared by all rows: H_SS [d, d] and n_k = t_k·H_SS·t_kᵀ per entry of the slab's sub-table.
  std::vector<double> HS(size_t(nv) * d * d), nk(size_t(nv) * maxK);
  for (int v = 0; v < nv; ++v) {
    const int c0 = v * d;
    double* hs = &HS[size_t(v) * d * d];
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) hs[i * d + j] = Hd[size_t(c0 + i) * C + c0 + j];
    const std::vector<double>& T = book.t[v % ns];
    for (int k = 0; k < book.entries[v % ns]; ++k) {
      double n2 = 0.0;
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) n2 += T[size_t(k) * d + i] * hs[i * d + j] * T[size_t(k) * d + j];
      nk[size_t(v) * maxK + k] = n2;
    }
  }

  // The sub-tables transposed ([d, K]) for the codes pass's scan (entry_scan.h).
  std::vector<std::vector<double>> Tt(static_cast<size_t>(ns));
  for (int sb = 0; sb < ns; ++sb) {
    const int K = book.entries[sb];
    Tt[size_t(sb)].resize(size_t(d) * K);
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < d; ++i) Tt[size_t(sb)][size_t(i) * K + k] = book.t[sb][size_t(k) * d + i];
  }

  // Sub-indices of every slab from the composed codes (codeword w holds slabs w·n_sub … w·n_sub + n_sub − 1).
  std::vector<uint32_t> sub_idx(size_t(R) * nv);
  for (size_t w = 0; w < size_t(R) * ncw; ++w)
    for (int i = 0; i < ns; ++i)
      sub_idx[w * ns + i] = static_cast<uint32_t>((enc.codes[w] >> book.split.offset[i]) &
                                                  ((uint64_t{1} << book.split.width[i]) - 1));

  std::vector<double> f0(R, 0.0), f1(R, 0.0);
  std::vector<int> rounds(R, 0);
  std::vector<int64_t> n_codes(R, 0), n_scales(R, 0);
#pragma omp parallel
  {
    std::vector<double> wh(C), e(C), g(C), t(kG), x(kG), dl(kG), dots(static_cast<size_t>(maxK));
#pragma omp for schedule(static)
    for (int r = 0; r < R; ++r) {
      const float* w = W + size_t(r) * C;
      uint32_t* idx = &sub_idx[size_t(r) * nv];
      gridbook::V2Plane* planes = &enc.planes[size_t(r) * nsb];
      for (int j = 0; j < C; ++j) {
        wh[j] = enc.w_hat[size_t(r) * C + j];
        e[j] = static_cast<double>(w[j]) - wh[j];
      }
      f0[r] = gradient(Hd, C, e.data(), g.data());
      // Accepts new decoded values x over columns [c0, c0 + n): ŵ = x, e = w − x, g −= Hd[:, cols]·δ.
      const auto accept = [&](int c0, int n, const double* xv) {
        for (int i = 0; i < n; ++i) {
          const double delta = xv[i] - wh[c0 + i];
          if (delta == 0.0) continue;
          wh[c0 + i] = xv[i];
          e[c0 + i] = static_cast<double>(w[c0 + i]) - xv[i];
          const double* h = &Hd[size_t(c0 + i) * C];
          for (int j = 0; j < C; ++j) g[j] -= delta * h[j];
        }
      };
      // Δf of replacing columns [c0, c0 + n) by xv: δ·H·δᵀ − 2·δ·g over those columns.
      const auto delta_f = [&](int c0, int n, const double* xv) {
        for (int i = 0; i < n; ++i) dl[i] = xv[i] - wh[c0 + i];
        double q = 0.0, lin = 0.0;
        for (int i = 0; i < n; ++i) {
          if (dl[i] == 0.0) continue;
          const double* h = &Hd[size_t(c0 + i) * C + c0];
          double a = 0.0;
          for (int j = 0; j < n; ++j) a += h[j] * dl[j];
          q += dl[i] * a;
          lin += dl[i] * g[c0 + i];
        }
        return q - 2.0 * lin;
      };
      for (int round = 0; round < opt.passes; ++round) {
        rounds[r] = round + 1;
        int64_t changed = 0;
        for (int v = 0; v < nv; ++v) {  // codes pass, scales fixed
          const int c0 = v * d;
          const std::vector<double>& T = book.t[v % ns];
          const gridbook::V2Plane& p = planes[c0 / kSB];
          const float s = gridbook::v2_scale(p.E, p.c[(c0 % kSB) / kG]);
          double b[8];
          for (int i = 0; i < d; ++i) {
            double a = g[c0 + i];
            for (int j = 0; j < d; ++j) a += HS[(size_t(v) * d + i) * d + j] * wh[c0 + j];
            b[i] = a;
          }
          const double* nkv = &nk[size_t(v) * maxK];
          const double sd = s;
          // score_k = s²·n_k − 2s·(t_k·b): the first minimum over the slab's sub-table.
          const int K = book.entries[v % ns];
          int bk = 0;
          entry_dots(Tt[size_t(v % ns)].data(), K, d, b, dots.data());
          best_entry_scan(nkv, dots.data(), K, sd, &bk);
          if (static_cast<uint32_t>(bk) == idx[v]) continue;
          for (int i = 0; i < d; ++i) x[i] = decoded(T[size_t(bk) * d + i], s);
          if (!(delta_f(c0, d, x.data()) < 0.0)) continue;
          accept(c0, d, x.data());
          idx[v] = static_cast<uint32_t>(bk);
          ++changed;
          ++n_codes[r];
        }
        for (int grp = 0; opt.scales && grp < C / kG; ++grp) {  // scales pass, codes fixed
          const int c0 = grp * kG;
          gridbook::V2Plane& p = planes[c0 / kSB];
          const int gi = (c0 % kSB) / kG;
          for (int j = 0; j < kG; ++j) {
            const int v = (c0 + j) / d;
            t[j] = book.t[v % ns][size_t(idx[v]) * d + (c0 + j) % d];
          }
          double best = 0.0;  // only a strict drop is taken
          int bc = -1;
          for (int c = 0; c < 16; ++c) {
            if (c == p.c[gi] || !gridbook::v2_legal(p.E, c)) continue;
            const float s = gridbook::v2_scale(p.E, c);
            for (int j = 0; j < kG; ++j) x[j] = decoded(t[j], s);
            const double df = delta_f(c0, kG, x.data());
            if (df < best) {
              best = df;
              bc = c;
            }
          }
          if (bc < 0) continue;
          const float s = gridbook::v2_scale(p.E, bc);
          for (int j = 0; j < kG; ++j) x[j] = decoded(t[j], s);
          accept(c0, kG, x.data());
          p.c[gi] = static_cast<uint8_t>(bc);
          ++changed;
          ++n_scales[r];
        }
        if (changed == 0) break;
      }
      f1[r] = gradient(Hd, C, e.data(), g.data());  // recomputed, not the running sums
      for (int j = 0; j < C; ++j) enc.w_hat[size_t(r) * C + j] = static_cast<float>(wh[j]);
    }
  }
  for (size_t w = 0; w < size_t(R) * ncw; ++w) enc.codes[w] = book.compose(&sub_idx[w * ns]);
  for (int r = 0; r < R; ++r) {
    res.f_before += f0[r];
    res.f_after += f1[r];
    res.rounds = std::max(res.rounds, rounds[r]);
    res.codes_changed += n_codes[r];
    res.scales_changed += n_scales[r];
  }
  return res;
}

}  // namespace gridq::quant

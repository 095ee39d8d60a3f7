// Learned pooled codebooks: sample extraction (the encoder's own scale search with the lattice book) and the
// weighted, grid-snapped Lloyd's iteration. See learned_codebook.h for the rules.
#include "quant/learned_codebook.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "gridbook/scale_coding.h"
#include "quant/dense_book.h"
#include "quant/grid_values.h"
#include "quant/lattice_codebook.h"

namespace gridq::quant {
namespace {

constexpr int kSB = gridbook::kSuperblock;
constexpr int kMaxDim = 4;                 // fp4 product sub-vectors are 4 wide, fp8 2 wide
using Point = std::array<float, kMaxDim>;  // padded with zeros beyond dim

// Samples of one sub-table: [n, dim] scaled coordinates and their weights.
struct Pool {
  std::vector<float> x;
  std::vector<float> w;
};

// Exact weighted nearest entry: argmin_k Σ_j w_j (x_j − c_kj)², ties to the lowest k. Entries are kept
// sorted along every coordinate; a query scans outward along its heaviest coordinate p from x_p and stops a
// direction once w_p·(c_p − x_p)² alone exceeds the best distance (every entry beyond it is strictly
// worse), so the answer equals a brute-force scan in index order.
class WeightedSearch {
 public:
  WeightedSearch(const std::vector<double>& c, int K, int dim) : c_(c), K_(K), dim_(dim) {
    for (int j = 0; j < dim; ++j) {
      std::vector<int>& ord = order_[j];
      ord.resize(K);
      std::iota(ord.begin(), ord.end(), 0);
      std::stable_sort(ord.begin(), ord.end(),
                       [&](int a, int b) { return c[size_t(a) * dim + j] < c[size_t(b) * dim + j]; });
      key_[j].resize(K);
      for (int i = 0; i < K; ++i) key_[j][i] = c[size_t(ord[i]) * dim + j];
    }
  }

  int find(const float* xf, const float* wf, double* dist) const {
    double x[kMaxDim], w[kMaxDim];
    int p = 0;
    for (int j = 0; j < dim_; ++j) {
      x[j] = xf[j];
      w[j] = wf[j];
      if (w[j] > w[p]) p = j;
    }
    double best = std::numeric_limits<double>::infinity();
    int bi = -1;
    auto visit = [&](int k) {
      const double* c = &c_[size_t(k) * dim_];
      double d = 0.0;
      for (int j = 0; j < dim_; ++j) {
        const double t = x[j] - c[j];
        d += w[j] * t * t;
      }
      if (d < best || (d == best && k < bi)) {
        best = d;
        bi = k;
      }
    };
    const std::vector<double>& key = key_[p];
    const std::vector<int>& ord = order_[p];
    const int start = static_cast<int>(std::lower_bound(key.begin(), key.end(), x[p]) - key.begin());
    for (int i = start; i < K_; ++i) {
      const double g = key[i] - x[p];
      if (w[p] * g * g > best) break;
      visit(ord[i]);
    }
    for (int i = start - 1; i >= 0; --i) {
      const double g = x[p] - key[i];
      if (w[p] * g * g > best) break;
      visit(ord[i]);
    }
    *dist = best;
    return bi;
  }

 private:
  const std::vector<double>& c_;
  int K_;
  int dim_;
  std::array<std::vector<int>, kMaxDim> order_;
  std::array<std::vector<double>, kMaxDim> key_;
};

Point to_point(const double* v, int dim) {
  Point p{};
  for (int j = 0; j < dim; ++j) p[j] = static_cast<float>(v[j]);
  return p;
}

struct LloydResult {
  std::vector<float> table;  // [K, dim] sorted
  LearnReport::Sub report;
};

// Weighted Lloyd's with snapping for one sub-table, starting from `init` ([K, dim], on the grid, distinct).
LloydResult lloyd(const Pool& pool, std::span<const float> init, int K, int dim, gridbook::Grid grid,
                  int iterations) {
  const std::span<const float> mags = grid_magnitudes(grid);
  const int64_t n = static_cast<int64_t>(pool.x.size() / dim);
  std::vector<double> c(init.begin(), init.end());  // [K, dim] current table
  std::vector<double> best_c = c;
  double best_err = std::numeric_limits<double>::infinity();
  LloydResult res;
  res.report.samples = n;

  std::vector<int> asg(n);
  std::vector<double> dist(n);
  std::vector<double> num(size_t(K) * dim), den(size_t(K) * dim);
  std::vector<int64_t> cnt(K);
  for (int it = 0;; ++it) {
    {
      const WeightedSearch search(c, K, dim);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i)
        asg[i] = search.find(&pool.x[size_t(i) * dim], &pool.w[size_t(i) * dim], &dist[i]);
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += dist[i];  // sample order: a fixed summation order
    if (it == 0) res.report.error_lattice = total;
    if (total < best_err) {  // strict: on a tie the earlier table (the lattice first) stays
      best_err = total;
      best_c = c;
      res.report.best_iteration = it;
    }
    if (it == iterations) break;

    std::fill(num.begin(), num.end(), 0.0);
    std::fill(den.begin(), den.end(), 0.0);
    std::fill(cnt.begin(), cnt.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int k = asg[i];
      ++cnt[k];
      for (int j = 0; j < dim; ++j) {
        const double w = pool.w[size_t(i) * dim + j];
        num[size_t(k) * dim + j] += w * pool.x[size_t(i) * dim + j];
        den[size_t(k) * dim + j] += w;
      }
    }
    std::set<Point> used;
    std::vector<int> reseed;
    for (int k = 0; k < K; ++k) {
      if (cnt[k] == 0) {
        reseed.push_back(k);
        continue;
      }
      double v[kMaxDim];
      for (int j = 0; j < dim; ++j) {
        const size_t o = size_t(k) * dim + j;
        v[j] = den[o] > 0.0 ? snap_to_grid(num[o] / den[o], mags) : c[o];
      }
      const Point pt = to_point(v, dim);
      if (!used.insert(pt).second) {
        reseed.push_back(k);
        continue;
      }
      for (int j = 0; j < dim; ++j) c[size_t(k) * dim + j] = v[j];
    }
    if (reseed.empty()) continue;
    std::vector<int64_t> by_fit(n);
    std::iota(by_fit.begin(), by_fit.end(), int64_t{0});
    std::sort(by_fit.begin(), by_fit.end(),
              [&](int64_t a, int64_t b) { return dist[a] != dist[b] ? dist[a] > dist[b] : a < b; });
    size_t r = 0;
    for (int64_t i : by_fit) {
      if (r == reseed.size()) break;
      double v[kMaxDim];
      for (int j = 0; j < dim; ++j) v[j] = snap_to_grid(pool.x[size_t(i) * dim + j], mags);
      const Point pt = to_point(v, dim);
      if (!used.insert(pt).second) continue;
      for (int j = 0; j < dim; ++j) c[size_t(reseed[r]) * dim + j] = v[j];
      ++r;
    }
    // Every sample snapped onto an existing entry: keep the entry's previous value if still free, else the
    // first free grid point in lexicographic order (the grid has far more points than any table).
    const std::vector<float> vals = signed_grid_values(grid);
    for (; r < reseed.size(); ++r) {
      double v[kMaxDim];
      for (int j = 0; j < dim; ++j) v[j] = c[size_t(reseed[r]) * dim + j];
      Point pt = to_point(v, dim);
      std::vector<size_t> digit(dim, 0);
      while (!used.insert(pt).second) {
        int j = dim - 1;
        while (j >= 0 && ++digit[j] == vals.size()) digit[j--] = 0;
        for (int q = 0; q < dim; ++q) pt[q] = vals[digit[q]];
      }
      for (int j = 0; j < dim; ++j) c[size_t(reseed[r]) * dim + j] = pt[j];
    }
  }

  res.report.error_learned = best_err;
  std::vector<Point> pts(K);
  for (int k = 0; k < K; ++k) pts[k] = to_point(&best_c[size_t(k) * dim], dim);
  std::sort(pts.begin(), pts.end());
  res.table.resize(size_t(K) * dim);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < dim; ++j) res.table[size_t(k) * dim + j] = pts[k][j];
  return res;
}

}  // namespace

struct CodebookLearner::State {
  gridbook::Rung rung;
  LearnOptions opt;
  gridbook::Codebook lattice;
  DenseBook book;
  int64_t total_codewords = 0;
  int64_t added_codewords = 0;
  std::vector<Pool> pools;  // [n_sub]
};

CodebookLearner::~CodebookLearner() = default;

Expected<std::unique_ptr<CodebookLearner>> CodebookLearner::create(const gridbook::Rung& rung,
                                                                   int64_t total_codewords,
                                                                   const LearnOptions& opt) {
  GRIDQ_RETURN_IF_ERROR(gridbook::validate_rung(rung));
  if (rung.mode != gridbook::Mode::Product)
    return err("learned codebook {}: only product rungs have sub-tables", rung.name());
  if (rung.grid == gridbook::Grid::FP4 && rung.layout_version != 2)
    return err(
        "learned codebook {}: learning scales samples with the two-tier v2 search; layout {} (v1) has no "
        "encoder in gridq",
        rung.name(), rung.layout_version);
  if (total_codewords <= 0)
    return err("learned codebook {}: total_codewords is {}", rung.name(), total_codewords);
  if (opt.iterations < 0 || opt.iterations > 100)
    return err("learned codebook {}: iterations {} outside [0, 100]", rung.name(), opt.iterations);
  if (opt.max_samples < 1) return err("learned codebook {}: max_samples must be >= 1", rung.name());
  GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook lat, lattice_codebook(rung));
  std::unique_ptr<CodebookLearner> l(new CodebookLearner());
  l->s_ = std::make_unique<State>(State{rung, opt, lat, DenseBook::from(lat), total_codewords, 0, {}});
  l->s_->pools.resize(rung.n_sub());
  return l;
}

Status CodebookLearner::add(const LearnInput& in) {
  State& s = *s_;
  const std::string who = "learned codebook " + s.rung.name() + ": input '" + in.name + "'";
  if (!in.W || !in.imatrix) return err("{}: null weight or imatrix", who);
  if (in.rows <= 0 || in.cols <= 0 || in.cols % kSB != 0)
    return err("{}: shape [{}, {}] needs rows > 0 and cols % 256 == 0", who, in.rows, in.cols);
  if (!std::isfinite(in.weight) || in.weight < 0)
    return err("{}: weight {} must be finite and >= 0", who, in.weight);
  const int R = in.rows, C = in.cols;
  for (int64_t i = 0; i < int64_t(R) * C; ++i)
    if (!std::isfinite(in.W[i])) return err("{}: W[{}, {}] is not finite", who, i / C, i % C);
  for (int j = 0; j < C; ++j)
    if (!std::isfinite(in.imatrix[j]) || in.imatrix[j] < 0)
      return err("{}: imatrix[{}] is {}; it must be finite and >= 0", who, j, in.imatrix[j]);
  const int64_t cw = int64_t(R) * C / gridbook::kVecDim;
  if (s.added_codewords + cw > s.total_codewords)
    return err("{}: adds {} codewords beyond the declared total of {}", who,
               s.added_codewords + cw - s.total_codewords, s.total_codewords);
  s.added_codewords += cw;
  if (in.weight == 0.0) return Status();  // a cold input: every sample would weigh 0

  // Rows kept: all, or the same fraction of every matrix, evenly spaced.
  const int64_t keep = s.total_codewords <= s.opt.max_samples
                           ? R
                           : static_cast<int64_t>((__int128)R * s.opt.max_samples / s.total_codewords);
  if (keep == 0) return Status();
  std::vector<int> rows(keep);
  for (int64_t i = 0; i < keep; ++i) rows[i] = static_cast<int>((2 * i + 1) * R / (2 * keep));
  const int nk = static_cast<int>(keep);
  std::vector<double> Wk(size_t(nk) * C);  // [nk, C]
  for (int i = 0; i < nk; ++i)
    for (int j = 0; j < C; ++j) Wk[size_t(i) * C + j] = in.W[size_t(rows[i]) * C + j];

  // Scale of every kept weight's group: fp4 [nk, C/16], fp8 [nk, 1].
  const bool fp4 = s.rung.grid == gridbook::Grid::FP4;
  const int groups = fp4 ? C / gridbook::kFp4Group : 1;
  std::vector<double> scale(size_t(nk) * groups);
  if (fp4) {
    // The pilot runs on the first kept rows: with every row kept that is the encoder's own pilot, and with
    // sampling it keeps the cost proportional to the sample (m2 only centres the exponent window).
    const double m2 = pilot_m2(Wk.data(), C, std::min(nk, s.opt.two_tier.pilot_rows), C, in.imatrix, s.book,
                               s.opt.two_tier);
    std::vector<gridbook::V2Plane> planes(nk);
    for (int b = 0; b < C / kSB; ++b) {
      two_tier_search_superblock(Wk.data() + size_t(b) * kSB, C, nk, in.imatrix + size_t(b) * kSB, s.book, m2,
                                 s.opt.two_tier, planes.data(), nullptr);
      for (int i = 0; i < nk; ++i)
        for (int g = 0; g < gridbook::kFp4Groups; ++g)
          scale[size_t(i) * groups + size_t(b) * gridbook::kFp4Groups + g] =
              gridbook::v2_scale(planes[i].E, planes[i].c[g]);
    }
  } else {
    std::vector<float> rs(nk);
    fp8cb_row_scales(Wk.data(), C, nk, C, in.imatrix, s.book, s.opt.fp8_refits, rs.data());
    for (int i = 0; i < nk; ++i) scale[i] = rs[i];
  }

  const int d = s.book.sub_dim, nsub = s.book.n_sub;
  for (int i = 0; i < nk; ++i) {
    for (int c0 = 0; c0 < C; c0 += gridbook::kVecDim) {
      for (int sub = 0; sub < nsub; ++sub) {
        float x[kMaxDim], w[kMaxDim];
        bool any = false;
        for (int j = 0; j < d; ++j) {
          const int col = c0 + sub * d + j;
          const double sc = scale[size_t(i) * groups + (fp4 ? col / gridbook::kFp4Group : 0)];
          x[j] = static_cast<float>(Wk[size_t(i) * C + col] / sc);
          const double wt = in.weight * double(in.imatrix[col]) * (s.opt.scale_weighted ? sc * sc : 1.0);
          w[j] = static_cast<float>(wt);
          any = any || w[j] > 0.0f;
        }
        if (!any) continue;
        Pool& p = s.pools[sub];
        p.x.insert(p.x.end(), x, x + d);
        p.w.insert(p.w.end(), w, w + d);
      }
    }
  }
  return Status();
}

Expected<gridbook::Codebook> CodebookLearner::finish(LearnReport* report) {
  State& s = *s_;
  const int nsub = s.book.n_sub, d = s.book.sub_dim;
  std::vector<std::vector<float>> tables;
  LearnReport rep;
  for (int sub = 0; sub < nsub; ++sub) {
    if (s.pools[sub].x.empty())
      return err(
          "learned codebook {}: no samples of non-zero importance for sub-table {} (every input cold or "
          "all-zero imatrix)",
          s.rung.name(), sub);
    const int K = s.book.entries[sub];
    LloydResult r = lloyd(s.pools[sub], s.lattice.sub[sub], K, d, s.rung.grid, s.opt.iterations);
    tables.push_back(std::move(r.table));
    rep.sub.push_back(r.report);
    s.pools[sub] = Pool{};  // release the samples
  }
  if (report) *report = rep;
  return gridbook::Codebook::from_tables(s.rung, std::move(tables), "learned " + s.rung.name());
}

Expected<gridbook::Codebook> learn_codebook(const gridbook::Rung& rung, std::span<const LearnInput> mats,
                                            const LearnOptions& opt, LearnReport* report) {
  int64_t total = 0;
  for (const LearnInput& m : mats) {
    if (m.rows <= 0 || m.cols <= 0)
      return err("learned codebook {}: input '{}' has an empty shape", rung.name(), m.name);
    total += int64_t(m.rows) * m.cols / gridbook::kVecDim;
  }
  if (mats.empty()) return err("learned codebook {}: no inputs", rung.name());
  GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<CodebookLearner> l, CodebookLearner::create(rung, total, opt));
  for (const LearnInput& m : mats) GRIDQ_RETURN_IF_ERROR(l->add(m));
  return l->finish(report);
}

}  // namespace gridq::quant

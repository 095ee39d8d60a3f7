#include "quant/lattice_codebook.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include "quant/grid_values.h"
#include "quant/prng.h"

namespace gridq::quant {
namespace {

using Point = std::array<float, 8>;  // padded with zeros beyond dim

// Exact nearest-entry search. Entries are sorted by (first, second) coordinate and grouped into slices of
// equal first coordinate; slices are visited outward from the query's first coordinate and, inside a slice,
// entries outward from its second coordinate, each scan cut off once the coordinate gaps alone exceed the
// best distance. Ties (equal distance) go to the lowest entry index, so the answer equals a brute-force scan
// in index order.
class NearestSearch {
 public:
  NearestSearch(const std::vector<double>& entries, int K, int dim) : entries_(entries), dim_(dim) {
    order_.resize(K);
    std::iota(order_.begin(), order_.end(), 0);
    auto key = [&](int k, int j) { return dim > j ? entries[size_t(k) * dim + j] : 0.0; };
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
      if (key(a, 0) != key(b, 0)) return key(a, 0) < key(b, 0);
      return key(a, 1) < key(b, 1);
    });
    k0_.resize(K);
    k1_.resize(K);
    for (int i = 0; i < K; ++i) {
      k0_[i] = key(order_[i], 0);
      k1_[i] = key(order_[i], 1);
    }
    for (int i = 0; i < K; ++i)
      if (i == 0 || k0_[i] != k0_[i - 1]) {
        slice_begin_.push_back(i);
        slice_key_.push_back(k0_[i]);
      }
    slice_begin_.push_back(K);
  }

  // Returns the entry index; *dist gets the squared distance.
  int find(const double* x, double* dist) const {
    double best = std::numeric_limits<double>::infinity();
    int bi = -1;
    auto visit = [&](int pos) {
      const int k = order_[pos];
      const double* c = &entries_[size_t(k) * dim_];
      double d = 0.0;
      for (int j = 0; j < dim_; ++j) {
        const double t = x[j] - c[j];
        d += t * t;
      }
      if (d < best || (d == best && k < bi)) {
        best = d;
        bi = k;
      }
    };
    auto scan_slice = [&](int s, double g0sq) {
      const int lo = slice_begin_[s], hi = slice_begin_[s + 1];
      if (dim_ < 2) {
        for (int pos = lo; pos < hi; ++pos) visit(pos);
        return;
      }
      const int start =
          static_cast<int>(std::lower_bound(k1_.begin() + lo, k1_.begin() + hi, x[1]) - k1_.begin());
      for (int pos = start; pos < hi; ++pos) {
        const double g1 = k1_[pos] - x[1];
        if (g0sq + g1 * g1 > best) break;
        visit(pos);
      }
      for (int pos = start - 1; pos >= lo; --pos) {
        const double g1 = x[1] - k1_[pos];
        if (g0sq + g1 * g1 > best) break;
        visit(pos);
      }
    };
    const int ns = static_cast<int>(slice_key_.size());
    const int s0 =
        static_cast<int>(std::lower_bound(slice_key_.begin(), slice_key_.end(), x[0]) - slice_key_.begin());
    for (int s = s0; s < ns; ++s) {
      const double g0 = slice_key_[s] - x[0];
      if (g0 * g0 > best) break;
      scan_slice(s, g0 * g0);
    }
    for (int s = s0 - 1; s >= 0; --s) {
      const double g0 = x[0] - slice_key_[s];
      if (g0 * g0 > best) break;
      scan_slice(s, g0 * g0);
    }
    *dist = best;
    return bi;
  }

 private:
  const std::vector<double>& entries_;
  int dim_;
  std::vector<int> order_;         // entry indices sorted by (c0, c1)
  std::vector<double> k0_, k1_;    // their first and second coordinates
  std::vector<int> slice_begin_;   // [n_slices + 1] runs of equal c0 in order_
  std::vector<double> slice_key_;  // [n_slices]
};

uint64_t lattice_seed(gridbook::Grid grid, int bits, int dim) {
  // "gridqlat" plus the table shape, mixed once so neighbouring shapes get unrelated streams.
  uint64_t s = 0x677269647161746Cull ^ (uint64_t(grid == gridbook::Grid::FP8) << 40) ^ (uint64_t(bits) << 8) ^
               uint64_t(dim);
  return SplitMix64(s).next();
}

// [m, dim] samples as the encoder sees them after dividing by the scale (see the header).
std::vector<double> make_samples(gridbook::Grid grid, int dim, int64_t m, const LatticeParams& p,
                                 uint64_t seed) {
  SplitMix64 rng(seed);
  const bool fp4 = grid == gridbook::Grid::FP4;
  const int run = fp4 ? p.fp4_group : p.fp8_row;  // weights sharing one scale
  const double top = grid_max(grid);
  std::vector<double> out(size_t(m) * dim);
  std::vector<double> g(run);
  int64_t filled = 0;  // coordinates written
  const int64_t total = m * dim;
  while (filled < total) {
    double amax = 0.0;
    for (int i = 0; i < run; ++i) {
      g[i] = rng.gaussian();
      amax = std::max(amax, std::fabs(g[i]));
    }
    if (amax == 0.0) continue;
    const double scale = amax / top;
    for (int i = 0; i + dim <= run && filled < total; i += dim)
      for (int j = 0; j < dim; ++j) out[size_t(filled++)] = g[i + j] / scale;
  }
  return out;
}

Point snap_point(const double* x, int dim, std::span<const float> mags) {
  Point pt{};
  for (int j = 0; j < dim; ++j) pt[j] = snap_to_grid(x[j], mags);
  return pt;
}

}  // namespace

std::vector<float> build_lattice_table(gridbook::Grid grid, int bits, int dim, const LatticeParams& p) {
  const int K = 1 << bits;
  const int64_t m = std::max<int64_t>(p.min_samples, int64_t{16} * K);
  const std::span<const float> mags = grid_magnitudes(grid);
  const std::vector<double> x = make_samples(grid, dim, m, p, lattice_seed(grid, bits, dim));

  std::vector<double> ent(size_t(K) * dim);  // [K, dim], always on the grid
  std::set<Point> used;
  auto set_entry = [&](int k, const Point& pt) {
    for (int j = 0; j < dim; ++j) ent[size_t(k) * dim + j] = pt[j];
  };

  // Initial entries: the first K samples whose snapped values are distinct.
  {
    int k = 0;
    for (int64_t i = 0; i < m && k < K; ++i) {
      const Point pt = snap_point(&x[size_t(i) * dim], dim, mags);
      if (used.insert(pt).second) set_entry(k++, pt);
    }
    if (k < K) {
      // Fewer distinct snapped samples than entries (not reachable with the shipped shapes): fill from the
      // grid in lexicographic order so the table stays distinct and deterministic.
      std::vector<float> vals = signed_grid_values(grid);
      std::vector<int> digit(dim, 0);
      while (k < K) {
        Point pt{};
        for (int j = 0; j < dim; ++j) pt[j] = vals[digit[j]];
        if (used.insert(pt).second) set_entry(k++, pt);
        int j = dim - 1;
        while (j >= 0 && ++digit[j] == static_cast<int>(vals.size())) digit[j--] = 0;
        if (j < 0) break;
      }
    }
  }

  std::vector<int> asg(m);
  std::vector<double> dist(m);
  std::vector<double> sum(size_t(K) * dim);
  std::vector<int64_t> cnt(K);
  std::vector<int64_t> by_fit(m);
  for (int it = 0; it < p.iterations; ++it) {
    NearestSearch search(ent, K, dim);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; ++i) asg[i] = search.find(&x[size_t(i) * dim], &dist[i]);

    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(cnt.begin(), cnt.end(), 0);
    for (int64_t i = 0; i < m; ++i) {  // sample order: a fixed summation order
      const int k = asg[i];
      ++cnt[k];
      for (int j = 0; j < dim; ++j) sum[size_t(k) * dim + j] += x[size_t(i) * dim + j];
    }

    used.clear();
    std::vector<int> reseed;
    for (int k = 0; k < K; ++k) {
      if (cnt[k] == 0) {
        reseed.push_back(k);
        continue;
      }
      double mean[8];
      for (int j = 0; j < dim; ++j) mean[j] = sum[size_t(k) * dim + j] / static_cast<double>(cnt[k]);
      const Point pt = snap_point(mean, dim, mags);
      if (!used.insert(pt).second) {
        reseed.push_back(k);
        continue;
      }
      set_entry(k, pt);
    }
    if (reseed.empty()) continue;
    std::iota(by_fit.begin(), by_fit.end(), int64_t{0});
    std::stable_sort(by_fit.begin(), by_fit.end(), [&](int64_t a, int64_t b) { return dist[a] > dist[b]; });
    size_t r = 0;
    for (int64_t i : by_fit) {
      if (r == reseed.size()) break;
      const Point pt = snap_point(&x[size_t(i) * dim], dim, mags);
      if (used.insert(pt).second) set_entry(reseed[r++], pt);
    }
    // Every sample snapped onto an existing entry (not reachable with the shipped shapes): keep the previous
    // iteration's distinct value for the remaining entries if it is still free, else fill from the grid.
    std::vector<float> vals = signed_grid_values(grid);
    for (; r < reseed.size(); ++r) {
      Point pt{};
      for (int j = 0; j < dim; ++j) pt[j] = static_cast<float>(ent[size_t(reseed[r]) * dim + j]);
      std::vector<int> digit(dim, 0);
      while (!used.insert(pt).second) {
        int j = dim - 1;
        while (j >= 0 && ++digit[j] == static_cast<int>(vals.size())) digit[j--] = 0;
        for (int q = 0; q < dim; ++q) pt[q] = vals[digit[q]];
      }
      set_entry(reseed[r], pt);
    }
  }

  std::vector<Point> pts(K);
  for (int k = 0; k < K; ++k) {
    pts[k] = Point{};
    for (int j = 0; j < dim; ++j) pts[k][j] = static_cast<float>(ent[size_t(k) * dim + j]);
  }
  std::sort(pts.begin(), pts.end());  // lexicographic by coordinate value
  std::vector<float> out(size_t(K) * dim);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < dim; ++j) out[size_t(k) * dim + j] = pts[k][j];
  return out;
}

const std::vector<float>& lattice_table(gridbook::Grid grid, int bits, int dim) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::vector<float>> cache;
  const auto key = std::make_tuple(grid == gridbook::Grid::FP8 ? 1 : 0, bits, dim);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build_lattice_table(grid, bits, dim)).first;
  return it->second;  // std::map nodes are stable, so the reference outlives later insertions
}

Expected<gridbook::Codebook> lattice_codebook(const gridbook::Rung& rung) {
  GRIDQ_RETURN_IF_ERROR(gridbook::validate_rung(rung));
  if (rung.mode != gridbook::Mode::Product)
    return err("lattice codebook for {}: only product mode has lattice sub-tables", rung.name());
  std::vector<std::vector<float>> tables;
  for (int b : gridbook::bit_split(rung.k, rung.n_sub()))
    tables.push_back(lattice_table(rung.grid, b, rung.sub_dim()));
  return gridbook::Codebook::from_tables(rung, std::move(tables), "lattice " + rung.name());
}

}  // namespace gridq::quant

// A product codebook in the form the encoders search: float64 entries per sub-table. Sub-vector v of a row
// (columns [v·d, v·d + d), d = sub_dim) uses sub-table v mod n_sub, so a codeword is sub0 ‖ sub1 ‖ … in
// column order (format.md §5).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "gridbook/codec.h"

namespace gridq::quant {

struct DenseBook {
  int n_sub = 0;
  int sub_dim = 0;
  std::vector<int> entries;            // [n_sub] 2^{b_i}
  std::vector<std::vector<double>> t;  // [n_sub][entries_i, sub_dim] row-major
  gridbook::SubSplit split;            // widths/offsets for composing full codes
  // Per sub-table, entry indices ordered by first coordinate (ties: lower index) and those coordinates,
  // ascending: the scale search's pruned nearest search walks outward from w_0/s in this order. Built by
  // from(); a book assembled by hand (scalar grids for gptq_core) leaves them empty and is searched in full.
  std::vector<std::vector<int>> by_first;
  std::vector<std::vector<double>> first;

  static DenseBook from(const gridbook::Codebook& cb);

  // Every sub-table's entries in order in one array ([n_sub, K, sub_dim] when the tables are equal in size:
  // the GPU encoder's book).
  std::vector<double> flat() const {
    std::vector<double> v;
    for (const std::vector<double>& s : t) v.insert(v.end(), s.begin(), s.end());
    return v;
  }

  // The full k-bit code of one codeword from its n_sub sub-indices.
  uint64_t compose(const uint32_t* sub_idx) const {
    uint64_t code = 0;
    for (int i = 0; i < n_sub; ++i) code |= uint64_t{sub_idx[i]} << split.offset[i];
    return code;
  }
};

inline DenseBook DenseBook::from(const gridbook::Codebook& cb) {
  DenseBook b;
  b.n_sub = cb.rung.n_sub();
  b.sub_dim = cb.rung.sub_dim();
  b.split = cb.split;
  for (int i = 0; i < b.n_sub; ++i) {
    b.entries.push_back(static_cast<int>(cb.sub[i].size() / b.sub_dim));
    b.t.emplace_back(cb.sub[i].begin(), cb.sub[i].end());
    const std::vector<double>& t = b.t.back();
    std::vector<int> order(static_cast<size_t>(b.entries.back()));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
      return t[size_t(x) * b.sub_dim] < t[size_t(y) * b.sub_dim];
    });
    std::vector<double> first;
    for (int k : order) first.push_back(t[size_t(k) * b.sub_dim]);
    b.by_first.push_back(std::move(order));
    b.first.push_back(std::move(first));
  }
  return b;
}

}  // namespace gridq::quant

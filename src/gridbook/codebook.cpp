// Codebook tables and their validation (format.md §10, §15 "Codebooks"): a table value that is off the
// rung's grid would make every weight that uses it decode to something no kernel reproduces.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/numerics.h"
#include "gridbook/codec.h"

namespace gridq::gridbook {

bool on_e2m1_grid(float v) {
  if (!std::isfinite(v)) return false;
  float a = std::fabs(v);
  for (int c = 0; c < 8; ++c)
    if (a == e2m1_to_f32(static_cast<uint8_t>(c))) return true;
  return false;
}

bool on_e4m3_grid(float v) {
  if (!std::isfinite(v) || std::fabs(v) > 448.0f) return false;
  return e4m3_to_f32(f32_to_e4m3_rne(v)) == v;
}

Expected<Codebook> Codebook::from_tables(const Rung& r, std::vector<std::vector<float>> tables,
                                         std::string_view label) {
  GRIDQ_RETURN_IF_ERROR(validate_rung(r));
  Codebook cb;
  cb.rung = r;
  cb.split = sub_split(r);
  if (tables.size() != static_cast<size_t>(cb.split.n))
    return err("{}: rung {} needs {} sub-tables, got {}", label, r.name(), cb.split.n, tables.size());
  const size_t sub_dim = static_cast<size_t>(r.sub_dim());
  for (size_t i = 0; i < tables.size(); ++i) {
    size_t rows = size_t{1} << cb.split.width[i];
    if (tables[i].size() != rows * sub_dim)
      return err("{}: sub-table {} of rung {} must be [{}, {}] ({} values), got {} values", label, i,
                 r.name(), rows, sub_dim, rows * sub_dim, tables[i].size());
    for (size_t j = 0; j < tables[i].size(); ++j) {
      float v = tables[i][j];
      bool ok = r.grid == Grid::FP4 ? on_e2m1_grid(v) : on_e4m3_grid(v);
      if (!ok)
        return err("{}: sub-table {} entry [{}, {}] = {} is off the {} grid declared by rung {}", label, i,
                   j / sub_dim, j % sub_dim, v, r.grid == Grid::FP4 ? "E2M1" : "E4M3", r.name());
    }
  }
  cb.sub = std::move(tables);
  // Bitwise (memcmp): -0 and +0 are different codes.
  cb.subs_identical = std::all_of(cb.sub.begin(), cb.sub.end(), [&](const std::vector<float>& t) {
    return t.size() == cb.sub[0].size() &&
           std::memcmp(t.data(), cb.sub[0].data(), t.size() * sizeof(float)) == 0;
  });
  if (r.grid == Grid::FP4 && sub_dim == 4)
    for (const auto& t : cb.sub) {
      const size_t n = t.size() / 4, at = cb.fp4_quad_planes.size();
      cb.fp4_quad_planes.resize(at + 2 * n);
      for (size_t e = 0; e < n; ++e)
        for (size_t j = 0; j < 4; ++j)
          cb.fp4_quad_planes[at + (j / 2) * n + e] |=
              static_cast<uint8_t>(f32_to_e2m1_rne(t[4 * e + j]) << (4 * (j % 2)));
    }
  return cb;
}

Expected<Codebook> Codebook::from_f16_tables(const Rung& r,
                                             const std::vector<std::span<const uint16_t>>& tables,
                                             std::string_view label) {
  std::vector<std::vector<float>> f(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    f[i].resize(tables[i].size());
    for (size_t j = 0; j < tables[i].size(); ++j) f[i][j] = f16_to_f32(tables[i][j]);
  }
  return from_tables(r, std::move(f), label);
}

void Codebook::lookup(uint64_t code, float out[kVecDim]) const {
  const int sub_dim = kVecDim / split.n;
  for (int i = 0; i < split.n; ++i) {
    size_t idx = static_cast<size_t>((code >> split.offset[i]) & code_mask(split.width[i]));
    const float* e = sub[static_cast<size_t>(i)].data() + idx * static_cast<size_t>(sub_dim);
    for (int j = 0; j < sub_dim; ++j) out[i * sub_dim + j] = e[j];
  }
}

}  // namespace gridq::gridbook

// Rung geometry and names (format.md §3, §4). type_size and bits/weight are formulas, never tables, so the
// whole ladder (k 12..24 fp4, 28..48 fp8) is covered.
#include "gridbook/rung.h"

#include <charconv>

namespace gridq::gridbook {

int Rung::n_sub() const {
  if (mode != Mode::Product) return 1;
  return grid == Grid::FP4 ? 2 : 4;
}

int Rung::sub_dim() const { return kVecDim / n_sub(); }

int Rung::plane_bytes() const {
  if (grid == Grid::FP8) return 0;
  return layout_version == 2 ? 9 : 16;
}

int Rung::type_size() const { return index_bytes() + plane_bytes(); }

std::string Rung::name() const {
  std::string family;
  if (grid == Grid::FP4) {
    family = mode == Mode::Signed ? "NVFP4_CB_S" : mode == Mode::Full ? "NVFP4_CB_FULL" : "NVFP4_CB_K";
  } else {
    family = mode == Mode::Signed ? "FP8_CB_S" : mode == Mode::Full ? "FP8_CB_FULL" : "FP8_CB_K";
  }
  return family + std::to_string(k);
}

double Rung::bits_per_weight() const { return type_size() * 8.0 / kSuperblock; }

Expected<Rung> parse_rung_name(std::string_view name, int layout_version) {
  struct Family {
    std::string_view prefix;
    Grid grid;
    Mode mode;
  };
  static constexpr Family kFamilies[] = {
      {"NVFP4_CB_K", Grid::FP4, Mode::Product},
      {"NVFP4_CB_S", Grid::FP4, Mode::Signed},
      {"FP8_CB_K", Grid::FP8, Mode::Product},
  };
  for (const Family& f : kFamilies) {
    if (!name.starts_with(f.prefix)) continue;
    std::string_view digits = name.substr(f.prefix.size());
    int k = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || digits[0] == '0')
      return err("rung name '{}': expected {}<k> with a decimal k", name, f.prefix);
    Rung r{f.grid, f.mode, k, f.grid == Grid::FP8 ? 1 : layout_version};
    GRIDQ_RETURN_IF_ERROR(validate_rung(r));
    return r;
  }
  return err("rung name '{}': unknown family (expected NVFP4_CB_K<k>, NVFP4_CB_S<k> or FP8_CB_K<k>)", name);
}

Status validate_rung(const Rung& r) {
  if (r.grid == Grid::FP4) {
    if (r.k < 12 || r.k > 24) return err("rung {}: k = {} outside the fp4 range 12..24", r.name(), r.k);
    if (r.layout_version != 1 && r.layout_version != 2)
      return err("rung {}: layout_version {} is not 1 or 2", r.name(), r.layout_version);
  } else {
    if (r.k < 28 || r.k > 48) return err("rung {}: k = {} outside the fp8 range 28..48", r.name(), r.k);
    if (r.layout_version != 1)
      return err("rung {}: fp8 rungs have no scale plane and are layout 1, got {}", r.name(),
                 r.layout_version);
  }
  if (r.mode == Mode::Signed)
    return err("rung {}: signed mode is defined by the format but not implemented in gridq (refused)",
               r.name());
  if (r.mode == Mode::Full)
    return err("rung {}: full mode is defined by the format but not implemented in gridq (refused)",
               r.name());
  return {};
}

std::vector<int> bit_split(int k, int n) {
  std::vector<int> w(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) w[static_cast<size_t>(i)] = k / n + (i < k % n ? 1 : 0);
  return w;
}

std::vector<int> bit_offsets(int k, int n) {
  std::vector<int> w = bit_split(k, n);
  std::vector<int> off(w.size());
  int acc = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    off[i] = acc;
    acc += w[i];
  }
  return off;
}

SubSplit sub_split(const Rung& r) {
  SubSplit s;
  s.n = r.n_sub();
  int acc = 0;
  for (int i = 0; i < s.n; ++i) {
    s.width[i] = r.k / s.n + (i < r.k % s.n ? 1 : 0);
    s.offset[i] = acc;
    acc += s.width[i];
  }
  return s;
}

}  // namespace gridq::gridbook

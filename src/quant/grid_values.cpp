#include "quant/grid_values.h"

#include <algorithm>
#include <array>

#include "core/numerics.h"

namespace gridq::quant {
namespace {

constexpr std::array<float, 8> kE2M1 = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

const std::vector<float>& e4m3_magnitudes() {
  static const std::vector<float> mags = [] {
    std::vector<float> m;
    for (int b = 0; b < 0x7F; ++b) m.push_back(e4m3_to_f32(static_cast<uint8_t>(b)));  // 0x7F is NaN
    return m;  // E4M3 bytes 0x00..0x7E are ascending in value
  }();
  return mags;
}

}  // namespace

std::span<const float> grid_magnitudes(gridbook::Grid grid) {
  if (grid == gridbook::Grid::FP4) return {kE2M1.data(), kE2M1.size()};
  return {e4m3_magnitudes().data(), e4m3_magnitudes().size()};
}

float grid_max(gridbook::Grid grid) { return grid == gridbook::Grid::FP4 ? 6.0f : 448.0f; }

float snap_to_grid(double x, std::span<const float> magnitudes) {
  const double a = x < 0 ? -x : x;
  // First magnitude >= a; the answer is it or its predecessor.
  auto it = std::lower_bound(magnitudes.begin(), magnitudes.end(), a,
                             [](float m, double v) { return static_cast<double>(m) < v; });
  float m;
  if (it == magnitudes.end()) {
    m = magnitudes.back();
  } else if (it == magnitudes.begin()) {
    m = *it;
  } else {
    const double hi = *it;
    const double lo = *(it - 1);
    m = (hi - a < a - lo) ? static_cast<float>(hi) : static_cast<float>(lo);  // tie -> smaller magnitude
  }
  if (m == 0.0f) return 0.0f;
  return x < 0 ? -m : m;
}

std::vector<float> signed_grid_values(gridbook::Grid grid) {
  std::span<const float> mags = grid_magnitudes(grid);
  std::vector<float> v;
  for (size_t i = mags.size(); i-- > 1;) v.push_back(-mags[i]);
  for (float m : mags) v.push_back(m);
  return v;
}

}  // namespace gridq::quant

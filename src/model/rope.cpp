// RoPE inverse frequencies. Every step is evaluated in fp32 the way transformers evaluates it in torch
// (laguna.md §1.3 "Precision of inv_freq"): a BF16 inv_freq moves logits by ~1e-2 and can flip routing.
#include <algorithm>
#include <cmath>

#include "model/model_spec.h"

namespace gridq::model {

namespace {

// torch: base ** (arange(0, r, 2).float() / r), all fp32; pow is evaluated in double and rounded once,
// which equals torch's fp32 pow to within an ulp.
std::vector<float> pos_freqs(double theta, int rotary_dim) {
  std::vector<float> out(static_cast<size_t>(rotary_dim / 2));
  const float base = static_cast<float>(theta);
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    out[static_cast<size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
  }
  return out;
}

}  // namespace

std::vector<float> rope_default_inv_freq(double theta, int rotary_dim) {
  std::vector<float> pf = pos_freqs(theta, rotary_dim);
  for (float& v : pf) v = 1.0f / v;
  return pf;
}

std::vector<float> rope_yarn_inv_freq(double theta, int rotary_dim, double factor, double original_max_pos,
                                      double beta_fast, double beta_slow) {
  const double r = rotary_dim;
  auto corr = [&](double n) { return r * std::log(original_max_pos / (n * 2.0 * M_PI)) / (2.0 * std::log(theta)); };
  double low = std::max(std::floor(corr(beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(beta_slow)), r - 1.0);
  if (low == high) high += 0.001;
  std::vector<float> pf = pos_freqs(theta, rotary_dim);
  std::vector<float> out(pf.size());
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < pf.size(); ++i) {
    const float extrap = 1.0f / pf[i];
    const float interp = 1.0f / (f * pf[i]);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrap_factor = 1.0f - ramp;
    out[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return out;
}

std::vector<float> rope_llama3_inv_freq(double theta, int rotary_dim, double factor, double low_freq_factor,
                                        double high_freq_factor, double original_max_pos) {
  std::vector<float> inv = rope_default_inv_freq(theta, rotary_dim);
  const double low_wavelen = original_max_pos / low_freq_factor;
  const double high_wavelen = original_max_pos / high_freq_factor;
  const float f = static_cast<float>(factor);
  for (float& v : inv) {
    const float wavelen = static_cast<float>(2.0 * M_PI) / v;
    float scaled = wavelen > low_wavelen ? v / f : v;
    const float smooth = (static_cast<float>(original_max_pos) / wavelen - static_cast<float>(low_freq_factor)) /
                         static_cast<float>(high_freq_factor - low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / f + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    v = medium ? smoothed : scaled;
  }
  return inv;
}

}  // namespace gridq::model

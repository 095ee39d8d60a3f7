// A fixed pseudo-random source for everything the quantizer must rebuild byte for byte (lattice samples,
// synthetic test data): splitmix64 plus Marsaglia's polar method. The Gaussian uses only +, −, ×, ÷, sqrt
// (correctly rounded by IEEE 754) and a logarithm written here, so the stream does not depend on the C
// library's libm, whose log/cos may differ in the last bit across versions.
#pragma once

#include <cmath>
#include <cstdint>

namespace gridq::quant {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits (exact conversion).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }

  // Standard normal (polar method; the spare value is kept for the next call).
  double gaussian();

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Natural log of x > 0 (finite) from basic operations only: x = m·2^e with m in [√½, √2), then
// log m = 2·atanh(t), t = (m−1)/(m+1), |t| < 0.172, by its odd series (error < 1e-17 relative).
inline double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // exact: m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double term = t;
  double sum = 0.0;
  for (int n = 1; n <= 41; n += 2) {  // t^41 < 1e-31: far below double precision
    sum += term / n;
    term *= t2;
  }
  constexpr double kLn2 = 0.69314718055994530942;
  return static_cast<double>(e) * kLn2 + 2.0 * sum;
}

inline double SplitMix64::gaussian() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  for (;;) {
    const double u = 2.0 * uniform() - 1.0;
    const double v = 2.0 * uniform() - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    const double f = std::sqrt(-2.0 * portable_log(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }
}

}  // namespace gridq::quant

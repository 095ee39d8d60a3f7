// Shared helpers for the CUDA tests: fresh random inputs every run (the seed is printed so a failure can be
// replayed with GRIDQ_TEST_SEED), NVFP4-CB test matrices built with the gridbook reference encoder, and
// float64 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/upload.h"

namespace gridq::cuda::test {

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    auto&& _st = (expr);                                     \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.message(); \
  } while (0)

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("GRIDQ_TEST_SEED");
    uint64_t v = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("[cuda tests] GRIDQ_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t salt) : g(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull)) {}
  uint64_t u64() { return g(); }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  uint16_t bf16(float a) { return f32_to_bf16(uniform(-a, a)); }
};

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define REQUIRE_GPU()                                                            \
  do {                                                                           \
    if (!::gridq::cuda::test::gpu_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// A random NVFP4-CB matrix: canonical bytes from the reference encoder and its reference BF16 decode.
struct CbMatrix {
  gridbook::Rung rung;
  int rows = 0, in = 0;
  std::vector<uint8_t> canonical;  // [rows, (in/256)·type_size]
  std::vector<uint16_t> cb_f16;    // [2][2^b][4]
  std::vector<uint16_t> dense;     // [rows, in] BF16, decoded by gridbook::decode_row
};

inline uint16_t random_e2m1_f16(Rng& r) {
  static const float vals[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = vals[r.uniform_int(0, 7)];
  if (r.uniform_int(0, 1)) v = -v;  // includes -0
  return f32_to_f16(v);
}

inline CbMatrix make_cb_matrix(int k, int v, int rows, int in, Rng& r) {
  CbMatrix m;
  m.rung = gridbook::Rung{gridbook::Grid::FP4, gridbook::Mode::Product, k, v};
  m.rows = rows;
  m.in = in;
  const int b = k / 2;
  m.cb_f16.resize(size_t{2} << b << 2);
  for (auto& x : m.cb_f16) x = random_e2m1_f16(r);
  const int ts = m.rung.type_size();
  m.canonical.assign(static_cast<size_t>(rows) * (in / 256) * ts, 0);
  std::vector<uint64_t> codes(32);
  for (size_t sb = 0; sb < m.canonical.size() / ts; ++sb) {
    for (auto& c : codes) c = r.u64() & ((uint64_t{1} << k) - 1);
    uint8_t* dst = m.canonical.data() + sb * ts;
    Status st;
    if (v == 2) {
      uint8_t E;
      do E = static_cast<uint8_t>(r.uniform_int(117, 135));
      while (gridbook::v2_lowest_legal_code(E) < 0);
      uint8_t c[16];
      for (auto& x : c) {
        do x = static_cast<uint8_t>(r.uniform_int(0, 15));
        while (!gridbook::v2_legal(E, x));
      }
      st = gridbook::encode_superblock_fp4_v2(m.rung, codes, E, c, dst);
    } else {
      uint8_t s[16];
      for (auto& x : s) {
        do x = static_cast<uint8_t>(r.uniform_int(0, 0x7E));  // incl. 0 and subnormals; no NaN, no sign
        while (x == 0x7F);
      }
      st = gridbook::encode_superblock_fp4_v1(m.rung, codes, s, dst);
    }
    EXPECT_TRUE(st.ok()) << st.message();
  }
  std::vector<std::span<const uint16_t>> tabs;
  const size_t half = m.cb_f16.size() / 2;
  tabs.emplace_back(m.cb_f16.data(), half);
  tabs.emplace_back(m.cb_f16.data() + half, half);
  auto book = gridbook::Codebook::from_f16_tables(m.rung, tabs, "test codebook");
  EXPECT_TRUE(book.ok()) << book.message();
  m.dense.resize(static_cast<size_t>(rows) * in);
  const size_t rb = static_cast<size_t>(in / 256) * ts;
  for (int row = 0; row < rows; ++row)
    gridbook::decode_row(m.rung, *book, m.canonical.data() + rb * row, in, 0.0f,
                         m.dense.data() + static_cast<size_t>(row) * in);
  return m;
}

inline std::array<float, 16> default_v2_table() {
  std::array<float, 16> t;
  for (int c = 0; c < 16; ++c) t[static_cast<size_t>(c)] = gridbook::kV2Table[static_cast<size_t>(c)];
  return t;
}

// Elementwise tolerance of a reordered FP32 sum rounded once to the output type: |y - ref| <= rel·|ref| +
// acc·Σ|w·x| (+ a tiny absolute floor). Reports the worst element and requires every element to be finite.
struct Tol {
  double rel = 1.0 / 256;    // BF16 output rounding (half an ulp is 2^-9)
  double acc = 1.0 / 65536;  // FP32 accumulation-order slack relative to Σ|w·x|
};

inline void expect_close(const std::vector<float>& y, const std::vector<double>& ref,
                         const std::vector<double>& absref, Tol tol, const std::string& what) {
  ASSERT_EQ(y.size(), ref.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double lim = tol.rel * std::fabs(ref[i]) + tol.acc * absref[i] + 1e-30;
    const double e = std::fabs(static_cast<double>(y[i]) - ref[i]);
    const double ratio = std::isfinite(y[i]) ? e / lim : 1e30;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
    if (!(ratio <= 1.0)) ++bad;
  }
  std::printf("[%s] worst err/limit = %.3g at %zu (y=%.6g ref=%.6g)\n", what.c_str(), worst_ratio, worst,
              static_cast<double>(y[worst]), ref[worst]);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << y.size() << " elements out of tolerance; worst at "
                     << worst << " y=" << y[worst] << " ref=" << ref[worst];
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  auto st = b.download(v.data(), n * sizeof(T));
  EXPECT_TRUE(st.ok()) << st.message();
  return v;
}

template <typename T>
DeviceBuffer upload_vec(const std::vector<T>& v, const char* what) {
  auto b = DeviceBuffer::alloc(v.size() * sizeof(T) + 16, what);
  EXPECT_TRUE(b.ok()) << b.message();
  auto st = b->upload(v.data(), v.size() * sizeof(T));
  EXPECT_TRUE(st.ok()) << st.message();
  return std::move(*b);
}

// GEMV reference in float64 and small input helpers.
inline std::vector<uint16_t> random_bf16(size_t n, float a, Rng& r) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = r.bf16(a);
  return v;
}

// y_ref[m, n] = Σ_k w[n, k]·x[m, k] (float64), plus Σ|w·x| for the tolerance.
inline void reference(const std::vector<double>& w, const std::vector<double>& x, int rows, int in, int M,
                      std::vector<double>& ref, std::vector<double>& absref) {
  ref.assign(static_cast<size_t>(M) * rows, 0.0);
  absref.assign(ref.size(), 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < rows; ++n) {
      double s = 0, a = 0;
      const double* wr = w.data() + static_cast<size_t>(n) * in;
      const double* xr = x.data() + static_cast<size_t>(m) * in;
      for (int k = 0; k < in; ++k) s += wr[k] * xr[k], a += std::fabs(wr[k] * xr[k]);
      ref[static_cast<size_t>(m) * rows + n] = s;
      absref[static_cast<size_t>(m) * rows + n] = a;
    }
}

inline std::vector<double> widen_bf16(const std::vector<uint16_t>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = bf16_to_f32(v[i]);
  return d;
}

// The fused gate+up+SiLU·mul contract in float64:
inline double silu(double z) { return z / (1.0 + std::exp(-z)); }

// h = silu(bf16(G))·bf16(U) reference from exact sums; returns pre-QDQ values and a first-order error scale.
inline void swiglu_ref(const std::vector<uint16_t>& w /*[2I, H]*/, const std::vector<uint16_t>& x /*[H]*/,
                       int I, int H, std::vector<double>& h, std::vector<double>& habs) {
  h.assign(static_cast<size_t>(I), 0);
  habs.assign(static_cast<size_t>(I), 0);
  for (int i = 0; i < I; ++i) {
    double G = 0, Ga = 0, U = 0, Ua = 0;
    for (int k = 0; k < H; ++k) {
      const double xv = bf16_to_f32(x[static_cast<size_t>(k)]);
      const double g = bf16_to_f32(w[static_cast<size_t>(i) * H + k]) * xv;
      const double u = bf16_to_f32(w[static_cast<size_t>(I + i) * H + k]) * xv;
      G += g, Ga += std::fabs(g), U += u, Ua += std::fabs(u);
    }
    const double gq = bf16_to_f32(f32_to_bf16(static_cast<float>(G)));
    const double uq = bf16_to_f32(f32_to_bf16(static_cast<float>(U)));
    h[static_cast<size_t>(i)] = silu(gq) * uq;
    // d(silu(g)·u) = silu'(g)·u·dg + silu(g)·du, with |silu'| <= 1.1; dg ~ Ga·eps, plus the roundings of g,
    // u.
    habs[static_cast<size_t>(i)] =
        1.1 * std::fabs(uq) * (Ga + std::fabs(G)) + std::fabs(silu(gq)) * (Ua + std::fabs(U));
  }
}

// Fills a device buffer with NaN-poison so that unwritten outputs are caught.
inline void poison(DeviceBuffer& b) { ASSERT_EQ(cudaMemset(b.as(), 0xFF, b.bytes()), cudaSuccess); }

}  // namespace gridq::cuda::test

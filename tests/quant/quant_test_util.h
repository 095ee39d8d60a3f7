// Shared helpers for the quantizer tests: seeded data (the quantizer's own fixed PRNG), a byte hash, and
// synthetic correlated inputs, the K16 lattice codebook.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gridbook/codec.h"
#include "quant/cb_gptq.h"
#include "quant/dense_book.h"
#include "quant/lattice_codebook.h"
#include "quant/prng.h"
#include "runtime/device.h"

namespace gridq::quant::testing {

inline std::vector<float> gaussian(size_t n, uint64_t seed, double sigma = 1.0) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(sigma * rng.gaussian());
  return v;
}

// FNV-1a over raw bytes; enough to compare two runs byte for byte.
inline uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
template <typename T>
uint64_t fnv1a(const std::vector<T>& v) {
  return fnv1a(v.data(), v.size() * sizeof(T));
}

// Rows with a non-identity covariance: x = z·M with M = 0.25·I + random [C, C] / sqrt(C) and per-column gains
// in [0.25, 2], so columns are strongly correlated and H = XᵀX is far from diagonal and ill-conditioned, as
// LLM activations are.
struct Correlated {
  int C;
  std::vector<float> M;     // [C, C]
  std::vector<float> gain;  // [C]
  Correlated(int C_, uint64_t seed) : C(C_), M(gaussian(size_t(C_) * C_, seed)), gain(C_) {
    SplitMix64 rng(seed ^ 0xABCDEFull);
    for (int i = 0; i < C; ++i) {
      for (int j = 0; j < C; ++j) M[size_t(i) * C + j] *= 1.0f / std::sqrt(static_cast<float>(C));
      M[size_t(i) * C + i] += 0.25f;
      gain[i] = static_cast<float>(0.25 + 1.75 * rng.uniform());
    }
  }
  std::vector<float> rows(int64_t n, uint64_t seed) const {
    const std::vector<float> z = gaussian(size_t(n) * C, seed);
    std::vector<float> x(size_t(n) * C, 0.0f);
    for (int64_t t = 0; t < n; ++t)
      for (int i = 0; i < C; ++i) {
        const float zi = z[size_t(t) * C + i];
        for (int j = 0; j < C; ++j) x[size_t(t) * C + j] += zi * M[size_t(i) * C + j];
      }
    for (int64_t t = 0; t < n; ++t)
      for (int j = 0; j < C; ++j) x[size_t(t) * C + j] *= gain[j];
    return x;
  }
};

// H = XᵀX in float64, returned as fp32 [C, C] (what the capture stores).
inline std::vector<float> gram(const std::vector<float>& X, int64_t n, int C) {
  std::vector<double> h(size_t(C) * C, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* x = &X[size_t(t) * C];
    for (int i = 0; i < C; ++i) {
      const double xi = x[i];
      for (int j = 0; j < C; ++j) h[size_t(i) * C + j] += xi * x[j];
    }
  }
  return std::vector<float>(h.begin(), h.end());
}

// The K16 (NVFP4-CB K16 v2) lattice codebook the CB-GPTQ tests fit against.
inline gridbook::Codebook k16() {
  auto r = gridbook::parse_rung_name("NVFP4_CB_K16", 2);
  EXPECT_TRUE(r.ok()) << r.message();
  auto cb = lattice_codebook(*r);
  EXPECT_TRUE(cb.ok()) << cb.message();
  return *cb;
}

// What a device encoder returns for an encoding (runtime::CbFp4Reply): sub-indices [R, C/4] of its composed
// codewords (quant/dense_book.h: sub0 in the low bits) and its planes (E, then the 16 group codes).
inline std::vector<uint32_t> split_codes(const DenseBook& b, const Fp4CbEncoding& e) {
  std::vector<uint32_t> idx(e.codes.size() * 2);
  for (size_t i = 0; i < e.codes.size(); ++i)
    for (int s = 0; s < 2; ++s)
      idx[2 * i + s] = static_cast<uint32_t>((e.codes[i] >> b.split.offset[s]) & uint64_t(b.entries[s] - 1));
  return idx;
}
inline std::vector<uint8_t> plane_bytes(const Fp4CbEncoding& e) {
  std::vector<uint8_t> p;
  for (const gridbook::V2Plane& v : e.planes) {
    p.push_back(v.E);
    p.insert(p.end(), v.c.begin(), v.c.end());
  }
  return p;
}
// The CPU encoders' options of a device request's settings (what a fake device encodes with), and a CPU
// encoding as the device's reply.
inline CbGptqOptions options_of(const runtime::CbFp4Settings& s) {
  CbGptqOptions o;
  o.damp = s.damp;
  o.two_tier.pilot_rows = s.pilot_rows;
  o.two_tier.refits = s.refits;
  return o;
}
inline runtime::CbFp4Reply reply_of(const DenseBook& b, const Fp4CbEncoding& e) {
  runtime::CbFp4Reply r;
  r.sub_idx = split_codes(b, e);
  r.planes = plane_bytes(e);
  r.identity = e.used_identity;
  r.damp_used = e.damp_used;
  return r;
}

// A CUDA backend for the quantizer's device paths on a machine without a GPU: the probe finds a "fake" GPU,
// the engine factory refuses; the test sets the encoder hooks it needs in `h`, then install()s them. The
// program's own registration comes back when the object goes.
class FakeCudaHooks {
 public:
  runtime::CudaBackendHooks h;
  FakeCudaHooks() {
    const runtime::CudaBackendHooks* before = runtime::cuda_backend_hooks();
    if (before) saved_ = *before;
    h.probe = [] { return runtime::CudaProbe{true, "fake"}; };
    h.create = [](const model::ModelSpec&, const runtime::ModelWeights&, std::shared_ptr<void>,
                  const runtime::DeviceOptions&) -> Expected<std::unique_ptr<runtime::Backend>> {
      return err("fake");
    };
  }
  void install() const { runtime::register_cuda_backend(h); }
  ~FakeCudaHooks() { runtime::register_cuda_backend(saved_); }
  FakeCudaHooks(const FakeCudaHooks&) = delete;
  FakeCudaHooks& operator=(const FakeCudaHooks&) = delete;

 private:
  runtime::CudaBackendHooks saved_;
};

}  // namespace gridq::quant::testing

// Shared helpers for the HF-fixture parity tests: load a logits fixture, compare logits rows against it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace gridq::testing {

// True in the ASan+UBSan build. Its job is memory and UB errors, not numbers (the normal build checks
// those), and it runs ~20x slower, so the long model runs there use a smaller slice of the same work.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline std::string repo_path(const std::string& rel) { return std::string(GRIDQ_SOURCE_DIR) + "/" + rel; }

struct Fixture {
  int64_t B = 0, T = 0, V = 0;
  std::vector<int32_t> ids;   // [B, T]
  std::vector<float> logits;  // [B, T, V]
};

inline Fixture load_fixture(const std::string& path) {
  Fixture f;
  auto file = io::SafetensorsFile::open(path);
  EXPECT_TRUE(file.ok()) << file.message();
  if (!file.ok()) return f;
  const io::TensorInfo* ids = (*file)->find("input_ids");
  const io::TensorInfo* lg = (*file)->find("logits");
  EXPECT_TRUE(ids && lg);
  if (!ids || !lg) return f;
  EXPECT_EQ(ids->dtype, io::DType::I32);
  EXPECT_EQ(lg->dtype, io::DType::F32);
  f.B = ids->shape[0];
  f.T = ids->shape[1];
  f.V = lg->shape[2];
  f.ids.resize(static_cast<size_t>(f.B * f.T));
  std::memcpy(f.ids.data(), ids->data, f.ids.size() * 4);
  f.logits.resize(static_cast<size_t>(f.B * f.T * f.V));
  std::memcpy(f.logits.data(), lg->data, f.logits.size() * 4);
  return f;
}

// The fixture's B windows as token sequences.
inline std::vector<std::vector<int32_t>> fixture_seqs(const std::string& path) {
  auto f = load_fixture(path);
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < f.B; ++b) out.emplace_back(f.ids.begin() + b * f.T, f.ids.begin() + (b + 1) * f.T);
  return out;
}

// The rows of the tiny fixtures' GPU parity check (tests/cuda/test_engine.cpp) and of the CPU's BF16 floor on
// them (rounding_floor_test.cpp): the fixture's windows plus a 320-token sequence (the engine issue's ≥ 300
// tokens; these tiny models have no tokenizer, so seeded ids below their 512-token vocabularies): 80 rows
// alone make a 99 % top-1 bound mean "no mismatch at all".
inline std::vector<std::vector<int32_t>> tiny_seqs(const std::string& fixture) {
  auto s = fixture_seqs(repo_path(fixture));
  std::mt19937 rng(11);
  std::vector<int32_t> ids(320);
  for (auto& t : ids) t = static_cast<int32_t>(rng() % 512u);
  s.push_back(ids);
  return s;
}

struct Compare {
  double max_abs = 0.0;
  double mean_kl = 0.0;  // KL(ref || got), float64
  int64_t argmax_mismatch = 0;
  int64_t rows = 0;
  double max_mismatch_margin = 0.0;  // largest ref[argmax ref] - ref[argmax got] over mismatched rows
};

// ref, got: [rows, V].
inline Compare compare_logits(const float* ref, const float* got, int64_t rows, int64_t V) {
  Compare c;
  c.rows = rows;
  double kl_sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = ref + r * V;
    const float* b = got + r * V;
    int64_t am = 0, bm = 0;
    double amax = a[0], bmax = b[0];
    for (int64_t v = 0; v < V; ++v) {
      c.max_abs = std::max(c.max_abs, std::abs(static_cast<double>(a[v]) - b[v]));
      if (a[v] > amax) amax = a[v], am = v;
      if (b[v] > bmax) bmax = b[v], bm = v;
    }
    if (am != bm) {
      ++c.argmax_mismatch;
      c.max_mismatch_margin = std::max(c.max_mismatch_margin, static_cast<double>(a[am]) - a[bm]);
    }
    double za = 0.0, zb = 0.0;
    for (int64_t v = 0; v < V; ++v) za += std::exp(a[v] - amax), zb += std::exp(b[v] - bmax);
    const double lza = std::log(za) + amax, lzb = std::log(zb) + bmax;
    double kl = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const double la = a[v] - lza, lb = b[v] - lzb;
      kl += std::exp(la) * (la - lb);
    }
    kl_sum += kl;
  }
  c.mean_kl = rows ? kl_sum / static_cast<double>(rows) : 0.0;
  return c;
}

inline void expect_parity(const Compare& c, const char* what) {
  std::printf("[parity] %s: rows %lld max|dlogit| %.3g mean KL %.3g argmax mismatches %lld\n", what,
              static_cast<long long>(c.rows), c.max_abs, c.mean_kl, static_cast<long long>(c.argmax_mismatch));
  EXPECT_EQ(c.argmax_mismatch, 0) << what;
  EXPECT_LT(c.mean_kl, 1e-4) << what;
  EXPECT_LT(c.max_abs, 1e-2) << what;
}

}  // namespace gridq::testing

#include "runtime/cpu/matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <span>
#include <vector>

#include "core/act_qdq.h"
#include "core/numerics.h"
#include "runtime/cpu/cb_rows.h"

namespace gridq::runtime::cpu {

// Multiversioned kernels have external linkage: ifunc resolvers and internal linkage do not mix on every
// toolchain.
constexpr int kLanes = 16;
constexpr int64_t kRowBlock = 4;        // weight rows widened to fp32 together, then reused for every token
constexpr int64_t kFusedMaxTokens = 4;  // below this many tokens BF16 rows are not widened first

// Same operations in every clone (no FMA: avx2 does not imply it), so the clones give identical bits.
__attribute__((target_clones("avx2", "default"))) float cpu_dot_impl(const float* a, const float* b,
                                                                     int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// BF16 row times fp32 vector without the widened copy: the same products in the same order as
// cpu_dot_impl on the widened row (widening is exact), so either path gives identical bits.
__attribute__((target_clones("avx2", "default"))) float cpu_dot_bf16(const uint16_t* w, const float* b,
                                                                     int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j)
      acc[j] += std::bit_cast<float>(static_cast<uint32_t>(w[i + j]) << 16) * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += std::bit_cast<float>(static_cast<uint32_t>(w[i]) << 16) * b[i];
  for (int k = kLanes / 2; k > 0; k /= 2)
    for (int j = 0; j < k; ++j) acc[j] += acc[j + k];
  return acc[0];
}

// Four cpu_dot_impl(w_i, x, n) at once (w: 4 rows of n, contiguous): the same lanes, the same products and
// sums in the same order per row, so the same bits; x is loaded once for all four rows and the eight
// independent accumulator chains hide the add latency that bounds a single dot (prefill is ~3x faster).
__attribute__((target("avx2"))) void cpu_dot4_avx2(const float* const* w, const float* x, int64_t n,
                                                   float* y) {
  // Named accumulators (an array of __m256 ends up on the stack and serialises on store forwarding).
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
         a31 = a00;
  const float *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    a00 = _mm256_add_ps(a00, _mm256_mul_ps(_mm256_loadu_ps(w0 + i), x0));
    a01 = _mm256_add_ps(a01, _mm256_mul_ps(_mm256_loadu_ps(w0 + i + 8), x1));
    a10 = _mm256_add_ps(a10, _mm256_mul_ps(_mm256_loadu_ps(w1 + i), x0));
    a11 = _mm256_add_ps(a11, _mm256_mul_ps(_mm256_loadu_ps(w1 + i + 8), x1));
    a20 = _mm256_add_ps(a20, _mm256_mul_ps(_mm256_loadu_ps(w2 + i), x0));
    a21 = _mm256_add_ps(a21, _mm256_mul_ps(_mm256_loadu_ps(w2 + i + 8), x1));
    a30 = _mm256_add_ps(a30, _mm256_mul_ps(_mm256_loadu_ps(w3 + i), x0));
    a31 = _mm256_add_ps(a31, _mm256_mul_ps(_mm256_loadu_ps(w3 + i + 8), x1));
  }
  const __m256 lo[4] = {a00, a10, a20, a30}, hi[4] = {a01, a11, a21, a31};
  for (int r = 0; r < 4; ++r) {
    if (i < n) {  // a tail: lanes 0.. take it, then the same tree as below, in scalar form
      float a[kLanes];
      _mm256_storeu_ps(a, lo[r]);
      _mm256_storeu_ps(a + 8, hi[r]);
      const float* wr = w[r];
      for (int64_t k = i, j = 0; k < n; ++k, ++j) a[j] += wr[k] * x[k];
      for (int s = kLanes / 2; s > 0; s /= 2)
        for (int j = 0; j < s; ++j) a[j] += a[j + s];
      y[r] = a[0];
      continue;
    }
    // The tree a[j] += a[j + s] for s = 8, 4, 2, 1 in registers: lane j of each step is the same sum.
    const __m256 s8 = _mm256_add_ps(lo[r], hi[r]);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    y[r] = _mm_cvtss_f32(s1);
  }
}

__attribute__((target_clones("avx2", "default"))) void cpu_widen_bf16(const uint16_t* in, float* out,
                                                                      int64_t n) {
  for (int64_t c = 0; c < n; ++c) out[c] = std::bit_cast<float>(static_cast<uint32_t>(in[c]) << 16);
}

namespace {

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

// Row r as fp32 for the product; FP8 W8A8 rows stay unscaled (the scale goes into the epilogue).
void row_f32(const QMatrix& w, int64_t r, float* out) {
  switch (w.format) {
    case WeightFormat::kBF16:
      cpu_widen_bf16(static_cast<const uint16_t*>(w.data) + r * w.cols, out, w.cols);
      return;
    case WeightFormat::kFP8: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + r * w.cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(p[c]);
      return;
    }
    default:
      dequantize_row(w, r, out);
  }
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) { return cpu_dot_impl(a, b, n); }

void dot4(const float* x, const float* const* w, int64_t n, float* y) {
  if (have_avx2()) {
    cpu_dot4_avx2(w, x, n, y);
    return;
  }
  for (int r = 0; r < 4; ++r) y[r] = cpu_dot_impl(w[r], x, n);
}

// y += a·x elementwise: a product, then a sum, per element (no FMA), so every path rounds alike.
__attribute__((target("avx2"))) void cpu_axpy_avx2(float a, const float* __restrict x, float* __restrict y,
                                                   int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) y[i] += a * x[i];
}

void axpy(float a, const float* x, float* y, int64_t n) {
  if (have_avx2()) {
    cpu_axpy_avx2(a, x, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void matmul(const QMatrix& w, const float* x, int64_t T, float* y) {
  const int64_t R = w.rows, C = w.cols;
  if (T <= 0 || R <= 0) return;
  // Activation contract, per token.
  std::vector<float> xq;
  std::vector<float> tok_scale;
  const float* xa = x;
  if (w.format == WeightFormat::kFP8) {
    xq.resize(static_cast<size_t>(T * C));
    tok_scale.resize(static_cast<size_t>(T));
    std::vector<uint8_t> codes(static_cast<size_t>(C));
    for (int64_t t = 0; t < T; ++t) {
      tok_scale[static_cast<size_t>(t)] =
          quantize_fp8_token_row_f32(std::span<const float>(x + t * C, static_cast<size_t>(C)), codes);
      for (int64_t c = 0; c < C; ++c)
        xq[static_cast<size_t>(t * C + c)] = e4m3_to_f32(codes[static_cast<size_t>(c)]);
    }
    xa = xq.data();
  } else if (w.act_bits == 8 || w.act_bits == 4) {
    xq.resize(static_cast<size_t>(T * C));
    for (int64_t t = 0; t < T; ++t) {
      std::span<const float> in(x + t * C, static_cast<size_t>(C));
      std::span<float> out(xq.data() + t * C, static_cast<size_t>(C));
      Status st = w.act_bits == 8 ? qdq_fp8_token_row_f32(in, out) : qdq_fp4_row_f32(in, out);
      (void)st;  // sizes are equal by construction; C % 16 is checked when the matrix is built
    }
    xa = xq.data();
  }
  const int64_t nblocks = (R + kRowBlock - 1) / kRowBlock;
  const bool dot4 = have_avx2();
  const bool parallel = R * C * std::max<int64_t>(T, 1) >= (1 << 15) && nblocks > 1;
  // Prefill walks the tokens in tiles that stay in L2 (x is re-read once per 4-row block), each thread
  // keeping the same row blocks for every tile (static schedule), so outputs never change hands.
  const int64_t tile =
      std::max<int64_t>(16, (int64_t{256} << 10) / (C * static_cast<int64_t>(sizeof(float))));
#pragma omp parallel if (parallel)
  {
    std::vector<float> wrow(static_cast<size_t>(kRowBlock * C));  // [kRowBlock, C]
    const float* const rows[kRowBlock] = {wrow.data(), wrow.data() + C, wrow.data() + 2 * C,
                                          wrow.data() + 3 * C};
    if (w.format == WeightFormat::kBF16 && T < kFusedMaxTokens) {
      // Decode: few tokens, so read each BF16 row straight from the weights.
      const uint16_t* wb = static_cast<const uint16_t*>(w.data);
#pragma omp for schedule(static)
      for (int64_t rb = 0; rb < nblocks; ++rb) {
        const int64_t r0 = rb * kRowBlock;
        const int64_t nr = std::min(kRowBlock, R - r0);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < nr; ++i) y[t * R + r0 + i] = cpu_dot_bf16(wb + (r0 + i) * C, xa + t * C, C);
      }
    } else {
      for (int64_t t0 = 0; t0 < T; t0 += tile) {
        const int64_t t1 = std::min(T, t0 + tile);
#pragma omp for schedule(static) nowait
        for (int64_t rb = 0; rb < nblocks; ++rb) {
          const int64_t r0 = rb * kRowBlock;
          const int64_t nr = std::min(kRowBlock, R - r0);
          for (int64_t i = 0; i < nr; ++i) row_f32(w, r0 + i, wrow.data() + i * C);
          for (int64_t t = t0; t < t1; ++t) {
            const float* xt = xa + t * C;
            float* yt = y + t * R + r0;
            if (dot4 && nr == kRowBlock)
              cpu_dot4_avx2(rows, xt, C, yt);
            else
              for (int64_t i = 0; i < nr; ++i) yt[i] = cpu_dot_impl(wrow.data() + i * C, xt, C);
            if (w.format == WeightFormat::kFP8)
              for (int64_t i = 0; i < nr; ++i)
                yt[i] = bf16_round(tok_scale[static_cast<size_t>(t)] * w.row_scale[r0 + i] * yt[i]);
          }
        }
      }
    }
  }
}

}  // namespace gridq::runtime::cpu

// CB rows for the CPU forward. Bound: the codebook lookups (two 16-byte table reads per 8 weights, the
// tables sit in L1) at decode, where the packed rows are ~7x fewer bytes than BF16 ones.
#include "runtime/cpu/cb_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/simd_tree.h"

namespace gridq::runtime::cpu {

namespace {

using gridbook::kCodewords;
using gridbook::kSuperblock;
using gridbook::kVecDim;

// Codeword c of a superblock of ts bytes: one 8-byte window where it fits inside the superblock (the
// reference's read_code_exact otherwise: rows may have no slack after them).
inline uint64_t code_at(const uint8_t* sb, int c, int k, int ts) {
  const int bit = c * k;
  if (bit / 8 + 8 <= ts) return (gridbook::load_le64(sb + bit / 8) >> (bit % 8)) & gridbook::code_mask(k);
  return gridbook::read_code_exact(sb, c, k);
}

bool fused_fp4(const QMatrix& m) {
  return have_avx2() && m.rung->grid == gridbook::Grid::FP4 && m.codebook->split.n == 2;
}

}  // namespace

Status check_cb(const QMatrix& m) {
  if (m.format != WeightFormat::kCB) return err("check_cb: matrix is {}, not CB", format_name(m.format));
  if (!m.rung || !m.codebook) return err("CB matrix [{}, {}] has no rung or codebook", m.rows, m.cols);
  if (m.cols % gridbook::kSuperblock != 0)
    return err("CB matrix [{}, {}]: input width is not a multiple of {}", m.rows, m.cols,
               gridbook::kSuperblock);
  if (m.row_bytes != gridbook::row_bytes(*m.rung, m.cols))
    return err("CB matrix [{}, {}]: row_bytes {} != {} for {}", m.rows, m.cols, m.row_bytes,
               gridbook::row_bytes(*m.rung, m.cols), m.rung->name());
  if (m.rung->grid == gridbook::Grid::FP8 && !m.row_scale)
    return err("CB matrix [{}, {}] ({}) lacks its per-row weight_scale", m.rows, m.cols, m.rung->name());
  if (m.act_bits != 4 && m.act_bits != 8 && m.act_bits != 16)
    return err("CB matrix [{}, {}]: act_bits {} is not 4, 8 or 16", m.rows, m.cols, m.act_bits);
  return {};
}

void decode_cb_row(const QMatrix& m, int64_t r, float* out) {
  const gridbook::Rung& R = *m.rung;
  const gridbook::Codebook& cb = *m.codebook;
  const int ts = R.type_size(), k = R.k, nsub = cb.split.n, sd = kVecDim / nsub;
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + r * m.row_bytes;
  const bool fp4 = R.grid == gridbook::Grid::FP4;
  const float rs = fp4 ? 0.0f : m.row_scale[r];
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
    const uint8_t* sb = row + s * ts;
    float scales[gridbook::kFp4Groups];
    if (fp4) gridbook::superblock_scales_fp4(R, sb, scales);
    float* o = out + s * kSuperblock;
    for (int c = 0; c < kCodewords; ++c) {
      const uint64_t code = code_at(sb, c, k, ts);
      for (int i = 0; i < nsub; ++i) {
        const uint64_t idx = (code >> cb.split.offset[i]) & gridbook::code_mask(cb.split.width[i]);
        const float* e = cb.sub[static_cast<size_t>(i)].data() + idx * static_cast<uint64_t>(sd);
        float* oc = o + c * kVecDim + i * sd;
        // fp4: v·scale_g is exact in BF16 (format.md §16), so the reference's bf16_rn is the identity.
        if (fp4)
          for (int j = 0; j < sd; ++j) oc[j] = e[j] * scales[c / 2];
        else
          for (int j = 0; j < sd; ++j) oc[j] = bf16_round(e[j] * rs);
      }
    }
  }
}

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

namespace {

// N rows of an fp4 product rung (two sub-tables of 4 values) against x. Codeword c of superblock s covers
// columns 256s + 8c .. +7, i.e. lanes 0-7 (c even) or 8-15 (c odd) of the reference order: even codewords
// go to lo, odd ones to hi, superblocks and codewords ascending, as the order wants.
template <int N>
void cb_dot_fp4_avx2(const QMatrix& m, int64_t r0, const float* x, float* y) {
  const gridbook::Rung& R = *m.rung;
  const gridbook::Codebook& cb = *m.codebook;
  const int ts = R.type_size(), k = R.k;
  const float* t0 = cb.sub[0].data();
  const float* t1 = cb.sub[1].data();
  const int off1 = cb.split.offset[1];
  const uint64_t mask0 = gridbook::code_mask(cb.split.width[0]),
                 mask1 = gridbook::code_mask(cb.split.width[1]);
  const uint8_t* rows[N];
  for (int i = 0; i < N; ++i) rows[i] = static_cast<const uint8_t*>(m.data) + (r0 + i) * m.row_bytes;
  __m256 lo[N], hi[N];
  for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  auto weights = [&](const uint8_t* sb, int c, float scale) {
    const uint64_t code = code_at(sb, c, k, ts);
    const __m128 a = _mm_loadu_ps(t0 + (code & mask0) * 4);
    const __m128 b = _mm_loadu_ps(t1 + ((code >> off1) & mask1) * 4);
    return _mm256_mul_ps(_mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1), _mm256_set1_ps(scale));
  };
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
    float sc[N][gridbook::kFp4Groups];
    for (int i = 0; i < N; ++i) gridbook::superblock_scales_fp4(R, rows[i] + s * ts, sc[i]);
    const float* xs = x + s * kSuperblock;
    for (int c = 0; c < kCodewords; c += 2) {
      const __m256 x0 = _mm256_loadu_ps(xs + c * kVecDim), x1 = _mm256_loadu_ps(xs + c * kVecDim + 8);
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        const uint8_t* sb = rows[i] + s * ts;
        lo[i] = _mm256_add_ps(lo[i], _mm256_mul_ps(weights(sb, c, sc[i][c / 2]), x0));
        hi[i] = _mm256_add_ps(hi[i], _mm256_mul_ps(weights(sb, c + 1, sc[i][c / 2]), x1));
      }
    }
  }
  for (int i = 0; i < N; ++i) y[i] = tree16_avx2(lo[i], hi[i]);
}

// The same for the 16-bit product rungs (NVFP4_CB_K16 v2: 8 + 8 index bits, two codes per 32-bit load,
// the v2 scale plane read inline): the artifact's expert format, the one a decode step spends its time in.
template <int N>
void cb_dot_k16v2_avx2(const QMatrix& m, int64_t r0, const float* x, float* y) {
  const gridbook::Codebook& cb = *m.codebook;
  const int ts = m.rung->type_size();
  const float* t0 = cb.sub[0].data();
  const float* t1 = cb.sub[1].data();
  const float* compose = gridbook::v2_compose_table().data();
  const uint8_t* rows[N];
  for (int i = 0; i < N; ++i) rows[i] = static_cast<const uint8_t*>(m.data) + (r0 + i) * m.row_bytes;
  __m256 lo[N], hi[N];
  for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  auto weights = [&](uint32_t code, __m256 scale) {
    const __m128 a = _mm_loadu_ps(t0 + (code & 0xFF) * 4);
    const __m128 b = _mm_loadu_ps(t1 + ((code >> 8) & 0xFF) * 4);
    return _mm256_mul_ps(_mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1), scale);
  };
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
    const float* xs = x + s * kSuperblock;
    for (int g = 0; g < gridbook::kFp4Groups; ++g) {  // group g = codewords 2g (lanes 0-7), 2g+1 (8-15)
      const __m256 x0 = _mm256_loadu_ps(xs + 16 * g), x1 = _mm256_loadu_ps(xs + 16 * g + 8);
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        const uint8_t* sb = rows[i] + s * ts;
        const uint8_t* plane = sb + 64;  // after the 32 16-bit codes
        const uint8_t nib = plane[1 + g / 2];
        const __m256 scale =
            _mm256_broadcast_ss(compose + plane[0] * 16 + (g % 2 == 0 ? (nib & 0xF) : (nib >> 4)));
        uint32_t codes;
        std::memcpy(&codes, sb + 4 * g, 4);  // codewords 2g (low half) and 2g+1
        lo[i] = _mm256_add_ps(lo[i], _mm256_mul_ps(weights(codes, scale), x0));
        hi[i] = _mm256_add_ps(hi[i], _mm256_mul_ps(weights(codes >> 16, scale), x1));
      }
    }
  }
  for (int i = 0; i < N; ++i) y[i] = tree16_avx2(lo[i], hi[i]);
}

bool k16v2(const QMatrix& m) {
  const auto& sp = m.codebook->split;
  return m.rung->k == 16 && m.rung->layout_version == 2 && sp.width[0] == 8 && sp.offset[1] == 8 &&
         sp.width[1] == 8;
}

}  // namespace

// The artifact's expert format, which has the register-decoding kernels (AVX2 reference, AVX-512 bf16; the
// latter reads the book's E2M1 quads, cb_rows_bf16.cpp).
bool fused_k16v2(const QMatrix& m) { return fused_fp4(m) && k16v2(m); }

#pragma GCC pop_options

void cb_dot_rows(const QMatrix& m, int64_t r0, int n, const float* x, float* y) {
  if (fused_k16v2(m)) {
    int i = 0;
    for (; i + 4 <= n; i += 4) cb_dot_k16v2_avx2<4>(m, r0 + i, x, y + i);
    for (; i < n; ++i) cb_dot_k16v2_avx2<1>(m, r0 + i, x, y + i);
    return;
  }
  if (fused_fp4(m)) {
    int i = 0;
    for (; i + 4 <= n; i += 4) cb_dot_fp4_avx2<4>(m, r0 + i, x, y + i);
    for (; i < n; ++i) cb_dot_fp4_avx2<1>(m, r0 + i, x, y + i);
    return;
  }
  thread_local std::vector<float> row;  // [cols] one decoded row, reused
  row.resize(static_cast<size_t>(m.cols));
  for (int i = 0; i < n; ++i) {
    decode_cb_row(m, r0 + i, row.data());
    y[i] = dot(row.data(), x, m.cols);
  }
}

}  // namespace gridq::runtime::cpu

// CB rows for the CPU forward. Bound: the codebook lookups (two 16-byte table reads per 8 weights, the
// tables sit in L1) at decode, where the packed rows are ~7x fewer bytes than BF16 ones.
#include "runtime/cpu/cb_rows.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/scratch.h"
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

// The artifact's expert format, which has the register-decoding kernels (AVX2 reference, AVX-512 bf16; the
// latter reads the book's E2M1 quads).
bool fused_k16v2(const QMatrix& m) { return fused_fp4(m) && k16v2(m) && m.codebook->fp4_quads.size() == 512; }

}  // namespace

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
GRIDQ_AVX512_WARNINGS_OFF

namespace {

// The two sub-books of a K16 v2 codebook as E2M1 quads (Codebook::fp4_quads: 256 + 256 words) in 16
// registers, and the 16 E2M1 values.
struct K16v2Books {
  __m512i t[16];  // t[0..7]: sub-book 0, entries 32i .. 32i + 31; t[8..15]: sub-book 1
  __m512 fp4;     // lane n: e2m1_to_f32(n)
};

K16v2Books load_books(const gridbook::Codebook& cb) {
  K16v2Books b;
  for (int i = 0; i < 16; ++i) b.t[i] = _mm512_loadu_si512(cb.fp4_quads.data() + 32 * i);
  alignas(64) float v[16];
  for (int n = 0; n < 16; ++n) v[n] = e2m1_to_f32(static_cast<uint8_t>(n));
  b.fp4 = _mm512_load_ps(v);
  return b;
}

// Word i of the result: t[idx_i] for the 256-word book t[0..7], idx_i the low 8 bits of word i of idx (the
// permutes read bits 0-5, bits 6 and 7 pick among the four 64-word quarters; higher bits are ignored).
inline __m512i lookup256(const __m512i* t, __m512i idx) {
  const __m512i a = _mm512_permutex2var_epi16(t[0], idx, t[1]);
  const __m512i b = _mm512_permutex2var_epi16(t[2], idx, t[3]);
  const __m512i c = _mm512_permutex2var_epi16(t[4], idx, t[5]);
  const __m512i d = _mm512_permutex2var_epi16(t[6], idx, t[7]);
  const __mmask32 m6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
  const __mmask32 m7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
  return _mm512_mask_blend_epi16(m7, _mm512_mask_blend_epi16(m6, a, b), _mm512_mask_blend_epi16(m6, c, d));
}

// The 256 weights of K16 v2 superblock `sb` as BF16, w[k] = columns 32k .. 32k + 31: each column's E2M1 code
// (both sub-books looked up 32 codewords at a time), then BF16(v·scale) of its group through a 32-word table
// of the 16 values times the scales of groups 2k and 2k + 1: the products the reference rounds (exact, §16),
// so the bits of gridbook::decode_superblock_fp4. About 0.5 instructions per weight (per-entry loads: ~2).
inline void k16v2_superblock(const K16v2Books& bk, const float* compose, const uint8_t* sb, __m512bh w[8]) {
  const __m512i codes =
      _mm512_loadu_si512(sb);  // 32 codes: low byte sub-book 0's index, high byte sub-book 1's
  const __m512i q0 = lookup256(bk.t, codes), q1 = lookup256(bk.t + 8, _mm512_srli_epi16(codes, 8));
  // Codeword c's eight codes as dword c (sub-book 0's quad, then 1's): columns 8c .. 8c + 7, 4 bits each.
  alignas(64) uint32_t cw[32];
  _mm512_store_si512(
      cw, _mm512_or_si512(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(q0)),
                          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(q1)), 16)));
  _mm512_store_si512(
      cw + 16,
      _mm512_or_si512(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(q0, 1)),
                      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(q1, 1)), 16)));
  const float* comp = compose + sb[64] * 16;  // the v2 plane follows the 32 16-bit codes
  // Columns 16-31 are group 2k + 1: their codes index the table's upper half.
  const __m512i upper = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(0x00100010), 1);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    // Byte j of codewords 4k .. 4k + 3 holds columns 2j (low nibble) and 2j + 1: as dword j, word 0 and 1.
    const __m512i b = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(cw + 4 * k)));
    const __m512i idx = _mm512_add_epi32(
        _mm512_and_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 12)), _mm512_set1_epi32(0x000F000F)), upper);
    const uint8_t nib = sb[64 + 1 + k];
    const __m512bh table = _mm512_cvtne2ps_pbh(_mm512_mul_ps(bk.fp4, _mm512_set1_ps(comp[nib >> 4])),
                                               _mm512_mul_ps(bk.fp4, _mm512_set1_ps(comp[nib & 0xF])));
    w[k] = (__m512bh)_mm512_permutexvar_epi16(idx, (__m512i)table);
  }
}

// A K16 v2 row as BF16.
void k16v2_row_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  const K16v2Books bk = load_books(*m.codebook);
  const int ts = m.rung->type_size();
  const float* compose = gridbook::v2_compose_table().data();
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + r * m.row_bytes;
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
    __m512bh w[8];
    k16v2_superblock(bk, compose, row + s * ts, w);
    for (int k = 0; k < 8; ++k) _mm512_storeu_si512(out + s * kSuperblock + 32 * k, (__m512i)w[k]);
  }
}

// NR K16 v2 rows against NT ≤ 3 tokens in the BF16 fast order (bf16_dot.h): each superblock decoded in
// registers (k16v2_superblock) and taken by one VDPBF16PS per 32 columns and token, so the bits are those of
// bf16_dot_rows on the decoded rows. Several rows at once: independent rows hide a superblock's decode.
template <int NR, int NT>
void cb_rows_k16v2_bf16(const QMatrix& m, int64_t r0, const uint16_t* xb, float* y, int64_t ldy) {
  const K16v2Books bk = load_books(*m.codebook);
  const int ts = m.rung->type_size();
  const float* compose = gridbook::v2_compose_table().data();
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = static_cast<const uint8_t*>(m.data) + (r0 + i) * m.row_bytes;
  __m512 acc[NR][NT];
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      __m512bh w[8];
      k16v2_superblock(bk, compose, rows[i] + s * ts, w);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k)
        for (int t = 0; t < NT; ++t)
          acc[i][t] = _mm512_dpbf16_ps(
              acc[i][t], w[k], (__m512bh)_mm512_loadu_si512(xb + t * m.cols + s * kSuperblock + 32 * k));
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t)
      y[t * ldy + i] = _mm_cvtss_f32(tree16x4_avx512(acc[i][t], acc[i][t], acc[i][t], acc[i][t]));
}

template <int NT>
void cb_k16v2_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, float* y, int64_t ldy) {
  int i = 0;
  for (; i + 4 <= nr; i += 4) cb_rows_k16v2_bf16<4, NT>(m, r0 + i, xb, y + i, ldy);
  for (; i < nr; ++i) cb_rows_k16v2_bf16<1, NT>(m, r0 + i, xb, y + i, ldy);
}

}  // namespace

GRIDQ_AVX512_WARNINGS_ON
#pragma GCC pop_options

void decode_cb_row_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  if (fused_k16v2(m)) return k16v2_row_bf16(m, r, out);
  thread_local std::vector<float> row;  // [cols] the row as fp32 (BF16 values), reused
  row.resize(static_cast<size_t>(m.cols));
  decode_cb_row(m, r, row.data());
  round_to_bf16(row.data(), m.cols, out);  // exact: every decoded weight is a BF16 value
}

void cb_dot_rows_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                      int64_t ldy) {
  if (fused_k16v2(m) && T < 4) {
    if (T == 1) return cb_k16v2_bf16<1>(m, r0, nr, xb, y, ldy);
    if (T == 2) return cb_k16v2_bf16<2>(m, r0, nr, xb, y, ldy);
    return cb_k16v2_bf16<3>(m, r0, nr, xb, y, ldy);
  }
  // Other rungs, and prefill: the rows decoded to BF16 once, then the BF16 kernels' tiles.
  thread_local LineVector<uint16_t> rows;  // [4, cols]
  rows.resize(static_cast<size_t>(4 * m.cols));
  for (int i = 0; i < nr; ++i) decode_cb_row_bf16(m, r0 + i, rows.data() + i * m.cols);
  bf16_dot_rows(rows.data(), m.cols, nr, xb, T, y, ldy);
}

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

// CB rows for the CPU forward. Bound: the codebook lookups (two 16-byte table reads per 8 weights, the
// tables sit in L1) at decode, where the packed rows are ~7x fewer bytes than BF16 ones.
#include "runtime/cpu/cb_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
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
bool fused_k16v2(const QMatrix& m) { return fused_fp4(m) && k16v2(m); }

// The bf16 path's register decoder: byte permutes (have_avx512_vbmi) over the book's quad planes. Elsewhere
// the rows are decoded by the reference into scratch.
bool fused_k16v2_bf16(const QMatrix& m) {
  return have_avx512_vbmi() && fused_k16v2(m) && m.codebook->fp4_quad_planes.size() == 1024;
}

}  // namespace

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi")
GRIDQ_AVX512_WARNINGS_OFF

namespace {

// A K16 v2 book's E2M1 quads as byte planes (Codebook::fp4_quad_planes) in 16 registers: loN / hiN hold
// sub-book N's low / high quad bytes, 64 entries per register.
struct K16v2Books {
  __m512i lo0[4], hi0[4], lo1[4], hi1[4];
};

K16v2Books load_books(const gridbook::Codebook& cb) {
  const uint8_t* p = cb.fp4_quad_planes.data();  // [sub 0 lo | sub 0 hi | sub 1 lo | sub 1 hi] x 256
  K16v2Books b;
  for (int i = 0; i < 4; ++i) {
    b.lo0[i] = _mm512_loadu_si512(p + 64 * i);
    b.hi0[i] = _mm512_loadu_si512(p + 256 + 64 * i);
    b.lo1[i] = _mm512_loadu_si512(p + 512 + 64 * i);
    b.hi1[i] = _mm512_loadu_si512(p + 768 + 64 * i);
  }
  return b;
}

// Byte i of the result: a[idx_i] for even i, b[idx_i] for odd i (256-byte tables; two 128-byte permutes each,
// bit 7 of the index picks the half). Shared: a and b are the same table (Codebook::subs_identical, every
// lattice book), so one lookup serves both: half the permutes.
template <bool Shared>
inline __m512i lookup_bytes(const __m512i* a, const __m512i* b, __m512i idx) {
  const __mmask64 upper = _mm512_movepi8_mask(idx);
  const __m512i ra = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(a[0], idx, a[1]),
                                            _mm512_permutex2var_epi8(a[2], idx, a[3]));
  if constexpr (Shared) {
    return ra;
  } else {
    const __m512i rb = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(b[0], idx, b[1]),
                                              _mm512_permutex2var_epi8(b[2], idx, b[3]));
    return _mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, ra, rb);
  }
}

// BF16(v·s) of the 16 E2M1 values v for every v2 scale s = compose[E·16 + c], [E·16 + c][16], rounded by the
// same VCVTNE2PS2BF16 a decode would run on v·s (so the same bits); built once, 128 KiB.
const uint16_t* k16v2_products() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(4096 * 16);
    alignas(64) float v[16];
    for (int n = 0; n < 16; ++n) v[n] = e2m1_to_f32(static_cast<uint8_t>(n));
    const __m512 fp4 = _mm512_load_ps(v);
    const float* compose = gridbook::v2_compose_table().data();
    for (size_t i = 0; i < 4096; ++i) {
      const __m512 p = _mm512_mul_ps(fp4, _mm512_set1_ps(compose[i]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(t.data() + 16 * i),
                          _mm512_castsi512_si256((__m512i)_mm512_cvtne2ps_pbh(p, p)));
    }
    return t;
  }();
  return table.data();
}

// The byte permute of step k's columns (k16v2_superblock): byte j takes byte 16·(k / 2) + j / 4 of its lane
// vector. A table, not a per-step loop: a loop the compiler does not fold runs as 64 scalar stores per step.
alignas(64) constexpr std::array<std::array<uint8_t, 64>, 4> kK16v2Pick = [] {
  std::array<std::array<uint8_t, 64>, 4> t{};
  for (size_t h = 0; h < 4; ++h)
    for (size_t j = 0; j < 64; ++j) t[h][j] = static_cast<uint8_t>(16 * h + j / 4);
  return t;
}();

// The 256 weights of K16 v2 superblock `sb` as BF16, w[k] = columns 32k .. 32k + 31: each column's E2M1 code
// (the 64 book indices looked up at once), then BF16(v·scale) of its group through a 32-word table of the 16
// values times the scales of groups 2k and 2k + 1 (k16v2_products): the products the reference rounds
// (exact, §16), so the bits of gridbook::decode_superblock_fp4, in ~9 vector instructions per 32 columns
// (per-entry table loads: ~60).
template <bool Shared>
inline void k16v2_superblock(const K16v2Books& bk, const uint16_t* products, const uint8_t* sb,
                             __m512bh w[8]) {
  // Code c = bytes 2c (sub-book 0's index) and 2c + 1 (sub-book 1's): the quads' low and high bytes.
  const __m512i codes = _mm512_loadu_si512(sb);
  const __m512i L = lookup_bytes<Shared>(bk.lo0, bk.lo1, codes),
                H = lookup_bytes<Shared>(bk.hi0, bk.hi1, codes);
  // Codeword c's eight codes as a dword (quad 0 then quad 1, 4 bits a column). The byte unpack works per
  // 128-bit lane: `even` holds codewords 8q .. 8q + 3 in lane q, `odd` codewords 8q + 4 .. 8q + 7.
  const __m512i even = _mm512_unpacklo_epi8(L, H), odd = _mm512_unpackhi_epi8(L, H);
  const uint16_t* pe = products + sb[64] * 256;  // the v2 plane follows the 32 16-bit codes: E, then codes
  // Word j of step k: the byte holding column j (lane k / 2 of even or odd, byte j / 2 of it) shifted to its
  // nibble; columns 16-31 (group 2k + 1) index the table's upper half.
  const __m512i shifts = _mm512_set1_epi32(0x00040000);
  const __m512i nibble = _mm512_set1_epi16(0x000F);
  const __m512i upper = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(0x0010), 1);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m512i x = _mm512_srlv_epi16(
        _mm512_permutexvar_epi8(_mm512_load_si512(kK16v2Pick[static_cast<size_t>(k / 2)].data()),
                                k % 2 ? odd : even),
        shifts);
    const __m512i idx = _mm512_ternarylogic_epi32(x, nibble, upper, 0xEA);  // (x & 0xF) | upper
    const uint8_t nib = sb[64 + 1 + k];
    const __m512i table = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pe + (nib & 0xF) * 16))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pe + (nib >> 4) * 16)), 1);
    w[k] = (__m512bh)_mm512_permutexvar_epi16(idx, table);
  }
}

// A K16 v2 row as BF16.
void k16v2_row_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  const K16v2Books bk = load_books(*m.codebook);
  const uint16_t* products = k16v2_products();
  const int ts = m.rung->type_size();
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + r * m.row_bytes;
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
    __m512bh w[8];
    k16v2_superblock<false>(bk, products, row + s * ts, w);
    for (int k = 0; k < 8; ++k) _mm512_storeu_si512(out + s * kSuperblock + 32 * k, (__m512i)w[k]);
  }
}

// NR K16 v2 rows against NT ≤ 3 tokens in the BF16 fast order (bf16_dot.h): each superblock decoded in
// registers (k16v2_superblock) and taken by one VDPBF16PS per 32 columns and token, so the bits are those of
// bf16_dot_rows on the decoded rows. Several rows at once: independent rows hide a superblock's decode.
template <int NR, int NT, bool Shared>
void cb_rows_k16v2_bf16(const QMatrix& m, const K16v2Books& bk, const uint16_t* products, int64_t r0,
                        const uint16_t* xb, float* y, int64_t ldy) {
  const int ts = m.rung->type_size();
  const uint8_t* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = static_cast<const uint8_t*>(m.data) + (r0 + i) * m.row_bytes;
  __m512 acc[NR][NT];
  for (int i = 0; i < NR; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      __m512bh w[8];
      k16v2_superblock<Shared>(bk, products, rows[i] + s * ts, w);
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

template <int NT, bool Shared>
void cb_k16v2_bf16_rows(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, float* y, int64_t ldy) {
  // The books and the product table once for all nr rows (a call per 4-row block cost a fifth of the rate
  // on 256-column rows).
  const K16v2Books bk = load_books(*m.codebook);
  const uint16_t* products = k16v2_products();
  int i = 0;
  for (; i + 4 <= nr; i += 4) cb_rows_k16v2_bf16<4, NT, Shared>(m, bk, products, r0 + i, xb, y + i, ldy);
  for (; i < nr; ++i) cb_rows_k16v2_bf16<1, NT, Shared>(m, bk, products, r0 + i, xb, y + i, ldy);
}

template <int NT>
void cb_k16v2_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, float* y, int64_t ldy) {
  if (m.codebook->subs_identical) return cb_k16v2_bf16_rows<NT, true>(m, r0, nr, xb, y, ldy);
  cb_k16v2_bf16_rows<NT, false>(m, r0, nr, xb, y, ldy);
}

}  // namespace

GRIDQ_AVX512_WARNINGS_ON
#pragma GCC pop_options

void decode_cb_row_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  if (fused_k16v2_bf16(m)) return k16v2_row_bf16(m, r, out);
  thread_local std::vector<float> row;  // [cols] the row as fp32 (BF16 values), reused
  row.resize(static_cast<size_t>(m.cols));
  decode_cb_row(m, r, row.data());
  round_to_bf16(row.data(), m.cols, out);  // exact: every decoded weight is a BF16 value
}

void cb_dot_rows_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                      int64_t ldy) {
  if (fused_k16v2_bf16(m) && T < 4) {
    if (T == 1) return cb_k16v2_bf16<1>(m, r0, nr, xb, y, ldy);
    if (T == 2) return cb_k16v2_bf16<2>(m, r0, nr, xb, y, ldy);
    return cb_k16v2_bf16<3>(m, r0, nr, xb, y, ldy);
  }
  // Other rungs, and prefill: each block of up to 4 rows decoded to BF16 once, then the BF16 kernels' tiles.
  thread_local LineVector<uint16_t> rows;  // [4, cols]
  rows.resize(static_cast<size_t>(4 * m.cols));
  for (int b = 0; b < nr; b += 4) {
    const int n = std::min(4, nr - b);
    for (int i = 0; i < n; ++i) decode_cb_row_bf16(m, r0 + b + i, rows.data() + i * m.cols);
    bf16_dot_rows(rows.data(), m.cols, n, xb, T, y + b, ldy);
  }
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

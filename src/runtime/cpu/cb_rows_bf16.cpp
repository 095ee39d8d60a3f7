// CB rows on the BF16 fast path (bf16_dot.h): K16 v2 rows decoded in registers by byte permutes over the
// book's E2M1 quad planes (AVX-512 VBMI), at decode straight into the dot products, at prefill into 4-row
// BF16 scratch; the other rungs decoded by the reference (cb_rows.cpp) into scratch. Every path gives the
// reference decode's BF16 values, so the bits of bf16_dot_rows on the decoded rows.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/numerics.h"
#include "gridbook/codec.h"
#include "gridbook/scale_coding.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/cb_rows.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/simd_tree.h"

namespace gridq::runtime::cpu {

namespace {

using gridbook::kSuperblock;

// The register decoder needs byte permutes (have_avx512_vbmi) and the book's quad planes. Elsewhere the rows
// are decoded by the reference into scratch.
bool fused_k16v2_bf16(const QMatrix& m) {
  return have_avx512_vbmi() && fused_k16v2(m) && m.codebook->fp4_quad_planes.size() == 1024;
}

// Prefill (T ≥ 4 tokens), and every T for rungs without a register decoder: each block of up to 4 rows
// decoded to BF16 scratch by decode(r, n, out [n, cols]) once, then the BF16 kernels' tiles (the bits of
// bf16_dot_rows on the decoded rows).
template <class Decode>
void rows_via_scratch(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                      int64_t ldy, Decode decode) {
  thread_local LineVector<uint16_t> rows;  // [4, cols]
  rows.resize(static_cast<size_t>(4 * m.cols));
  for (int b = 0; b < nr; b += 4) {
    const int n = std::min(4, nr - b);
    decode(r0 + b, n, rows.data());
    bf16_dot_rows(rows.data(), m.cols, n, xb, T, y + b, ldy);
  }
}

}  // namespace

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

// Rows r0 .. r0 + n − 1 of a K16 v2 matrix as BF16, out [n, cols], with books the caller loaded once.
template <bool Shared>
void k16v2_rows_bf16(const QMatrix& m, const K16v2Books& bk, const uint16_t* products, int64_t r0, int n,
                     uint16_t* out) {
  const int ts = m.rung->type_size();
  for (int i = 0; i < n; ++i) {
    const uint8_t* row = static_cast<const uint8_t*>(m.data) + (r0 + i) * m.row_bytes;
    uint16_t* o = out + static_cast<int64_t>(i) * m.cols;
    for (int64_t s = 0; s < m.cols / kSuperblock; ++s) {
      __m512bh w[8];
      k16v2_superblock<Shared>(bk, products, row + s * ts, w);
      for (int k = 0; k < 8; ++k) _mm512_storeu_si512(o + s * kSuperblock + 32 * k, (__m512i)w[k]);
    }
  }
}

template <bool Shared>
void k16v2_row_bf16(const QMatrix& m, int64_t r, uint16_t* out) {
  k16v2_rows_bf16<Shared>(m, load_books(*m.codebook), k16v2_products(), r, 1, out);
}

// Prefill (T ≥ 4 tokens) through scratch, the books loaded once for all nr rows, not once per row.
template <bool Shared>
void k16v2_prefill(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                   int64_t ldy) {
  const K16v2Books bk = load_books(*m.codebook);
  const uint16_t* products = k16v2_products();
  rows_via_scratch(m, r0, nr, xb, T, y, ldy, [&](int64_t r, int n, uint16_t* out) {
    k16v2_rows_bf16<Shared>(m, bk, products, r, n, out);
  });
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
  if (fused_k16v2_bf16(m))
    return m.codebook->subs_identical ? k16v2_row_bf16<true>(m, r, out) : k16v2_row_bf16<false>(m, r, out);
  thread_local std::vector<float> row;  // [cols] the row as fp32 (BF16 values), reused
  row.resize(static_cast<size_t>(m.cols));
  decode_cb_row(m, r, row.data());
  round_to_bf16(row.data(), m.cols, out);  // exact: every decoded weight is a BF16 value
}

void cb_dot_rows_bf16(const QMatrix& m, int64_t r0, int nr, const uint16_t* xb, int64_t T, float* y,
                      int64_t ldy) {
  if (fused_k16v2_bf16(m)) {
    if (T == 1) return cb_k16v2_bf16<1>(m, r0, nr, xb, y, ldy);
    if (T == 2) return cb_k16v2_bf16<2>(m, r0, nr, xb, y, ldy);
    if (T == 3) return cb_k16v2_bf16<3>(m, r0, nr, xb, y, ldy);
    if (m.codebook->subs_identical) return k16v2_prefill<true>(m, r0, nr, xb, T, y, ldy);
    return k16v2_prefill<false>(m, r0, nr, xb, T, y, ldy);
  }
  rows_via_scratch(m, r0, nr, xb, T, y, ldy, [&](int64_t r, int n, uint16_t* out) {
    for (int i = 0; i < n; ++i) decode_cb_row_bf16(m, r + i, out + static_cast<int64_t>(i) * m.cols);
  });
}

}  // namespace gridq::runtime::cpu

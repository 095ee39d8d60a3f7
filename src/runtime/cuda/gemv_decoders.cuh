// The GEMV decoders: a weight format's unit bytes → tensor-core A-fragments (BF16, FP8 E4M3, NVFP4-CB),
// and the engine's global-load helpers. gemv_impl.cuh (the engine) streams units through them.
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

__device__ __forceinline__ uint4 ld16(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint32_t ld4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t ld2(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
// Activation loads: the read-only (non-coherent) path in a single kernel; plain coherent loads in the
// persistent chain, where a phase reads what an earlier phase of the same launch wrote (visible after the
// grid barrier's acquire, PTX memory model; the non-coherent path has no such guarantee). Plain loads still
// allocate in L1, which serves other warps of the SM reading the same activations.
template <bool kCoherent>
__device__ __forceinline__ uint4 ldx16(const void* p) {
  if constexpr (kCoherent) {
    uint4 v;  // a weak ld.global (never turned into the non-coherent path), ordered after the barrier
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
  } else
    return __ldg(static_cast<const uint4*>(p));
}

// ---------------------------------------------------------------------------------------------------------
// Decoders. Each gives: kUnitK, kUnitBytes, kSmemBytes, Frag (registers of one unit), load(), XFrag/load_x()
// (one token's activations for the unit) and mma() accumulating into acc[4] of one 8-token tile.

struct DecBF16 {
  static constexpr int kUnitK = 64, kUnitBytes = 2048, kSmemBytes = 0;
  struct Frag {
    uint4 w[4];
  };
  struct XFrag {
    uint4 v[2];
  };
  __device__ static void init_smem(void*, const KParams&) {}
  __device__ static void load(Frag& f, const uint8_t* u, int lane) {
#pragma unroll
    for (int i = 0; i < 4; ++i) f.w[i] = ld16(u + i * 512 + lane * 16);
  }
  // x points at this token's row + the unit's K offset; lane t owns K [16t, 16t+16).
  template <bool kCoherent = false>
  __device__ static void load_x(XFrag& x, const uint16_t* xr, int t, bool valid) {
    if (valid) {
      x.v[0] = ldx16<kCoherent>(xr + 16 * t);
      x.v[1] = ldx16<kCoherent>(xr + 16 * t + 8);
    } else {
      x.v[0] = x.v[1] = make_uint4(0, 0, 0, 0);
    }
  }
  template <int NT>
  __device__ static void mma(const Frag& f, const XFrag (&x)[NT], float (&acc)[NT][4], const void*, int) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int p = j / 2, o = (j % 2) * 2;
      uint32_t a0 = word(f.w[p], o), a2 = word(f.w[p], o + 1);
      uint32_t a1 = word(f.w[2 + p], o), a3 = word(f.w[2 + p], o + 1);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mma_bf16(acc[nt], a0, a1, a2, a3, word(x[nt].v[p], o), word(x[nt].v[p], o + 1));
    }
  }
};

struct DecFP8 {
  static constexpr int kUnitK = 64, kUnitBytes = 1024, kSmemBytes = 0;
  struct Frag {
    uint4 w[2];
  };
  struct XFrag {
    uint4 v;
  };
  __device__ static void init_smem(void*, const KParams&) {}
  __device__ static void load(Frag& f, const uint8_t* u, int lane) {
    f.w[0] = ld16(u + lane * 16);
    f.w[1] = ld16(u + 512 + lane * 16);
  }
  template <bool kCoherent = false>
  __device__ static void load_x(XFrag& x, const uint8_t* xr, int t, bool valid) {
    x.v = valid ? ldx16<kCoherent>(xr + 16 * t) : make_uint4(0, 0, 0, 0);
  }
  template <int NT>
  __device__ static void mma(const Frag& f, const XFrag (&x)[NT], float (&acc)[NT][4], const void*, int) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a0 = word(f.w[0], 2 * h), a2 = word(f.w[0], 2 * h + 1);
      uint32_t a1 = word(f.w[1], 2 * h), a3 = word(f.w[1], 2 * h + 1);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        mma_e4m3(acc[nt], a0, a1, a2, a3, word(x[nt].v, 2 * h), word(x[nt].v, 2 * h + 1));
    }
  }
};

// NVFP4-CB product mode, k = 2b bits per codeword (two b-bit sub-indices into two 2^b × 4 tables).
// Unit = 16 rows × one superblock. Lane (g, t) owns weights [64t, 64t+64) of rows g, g+8: sub-vectors
// j = 0..15 (4 weights each), scale groups 4t..4t+3. The two sub-tables sit in shared memory as BF16×4
// entries, replicated kRep times so that the 16 lanes of a half-warp read distinct bank pairs.
template <int K, int V>
struct DecCB {
  static constexpr int B = K / 2;
  static constexpr int N16 = K / 16, N4 = (K % 16) / 4, NW = K / 4;
  static constexpr int kUnitK = 256;
  static constexpr int kUnitBytes = 16 * (4 * K + (V == 2 ? 9 : 16));
  static constexpr int kRep = K <= 16 ? 16 : (K == 20 ? 4 : 1);
  static constexpr int kTabEntries = 2 << B;  // both sub-tables
  static constexpr int kScaleTabOff = kTabEntries * kRep * 8;
  static constexpr int kSmemBytes = kScaleTabOff + 256 * 4;
  // K16 (byte sub-indices): the tables interleaved as [index][sub-table][rep] (256 B an index), so that a
  // lookup's offset is one byte permute of the record word (decode). Elsewhere [sub-table][index][rep].
  static constexpr bool kBytePlanes = B == 8 && kRep == 16;
  // The codebook entry (sub-table · 2^B + index) held by table slot i.
  __device__ static int entry_of(int i) {
    if constexpr (kBytePlanes)
      return ((i >> 4) & 1) * 256 + (i >> 5);
    else
      return i / kRep;
  }
  struct Frag {
    uint32_t rec[2][NW];
    uint32_t sc[2];
    uint32_t e[2];
  };
  struct XFrag {
    uint4 v[8];
  };

  __device__ static void init_smem(void* smem, const KParams& p) {
    // Replicated copy i = e·kRep + r of entry e: consecutive threads store consecutive words (no bank
    // conflicts); the loads are issued in batches so that the fill costs a few L2 round trips, not one per
    // word.
    uint2* tab = static_cast<uint2*>(smem);
    const uint2* cb = reinterpret_cast<const uint2*>(p.codebook);
    constexpr int kTotal = kTabEntries * kRep, kBatch = 16;
    const int nt = static_cast<int>(blockDim.x);
    for (int base = 0; base < kTotal; base += kBatch * nt) {
      uint2 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * nt + static_cast<int>(threadIdx.x);
        if (i < kTotal) v[j] = __ldg(cb + entry_of(i));
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * nt + static_cast<int>(threadIdx.x);
        if (i < kTotal) tab[i] = v[j];
      }
    }
    int* st = reinterpret_cast<int*>(static_cast<char*>(smem) + kScaleTabOff);
    if constexpr (V == 2) {  // both halves of a word: scale2 adds the superblock's exponent to both at once
      if (threadIdx.x < 16)
        st[threadIdx.x] = static_cast<int>(static_cast<uint32_t>(p.stab[threadIdx.x]) * 0x10001u);
    } else {
      // E4M3 byte -> BF16 bits (exact); NaN bytes -> BF16 NaN. Load-time checks refuse NaN and signed bytes.
      for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        int s = (b & 0x80) << 8, e = (b >> 3) & 15, m = b & 7, v;
        if ((b & 0x7F) == 0x7F)
          v = s | 0x7FC0;
        else if (e)
          v = s | ((e + 120) << 7) | (m << 4);
        else if (m) {  // subnormal m·2^-9: normalise
          int sh = m >= 4 ? 0 : (m >= 2 ? 1 : 2);
          int mm = (m << sh) & 3;  // bits below the leading one, as a 2-bit field
          v = s | ((120 - sh) << 7) | (mm << 5);
        } else
          v = s;
        st[b] = v;
      }
    }
  }

  __device__ static void load(Frag& f, const uint8_t* u, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int p = 0; p < N16; ++p) {
        uint4 v = ld16(u + (p * 2 + h) * 512 + lane * 16);
        f.rec[h][4 * p] = v.x, f.rec[h][4 * p + 1] = v.y, f.rec[h][4 * p + 2] = v.z,
                     f.rec[h][4 * p + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < N4; ++q) f.rec[h][4 * N16 + q] = ld4(u + N16 * 1024 + (q * 2 + h) * 128 + lane * 4);
      if constexpr (V == 2) {
        f.sc[h] = ld2(u + 64 * K + (h * 32 + lane) * 2);
        f.e[h] = u[64 * K + 128 + h * 8 + lane / 4];
      } else {
        f.sc[h] = ld4(u + 64 * K + (h * 32 + lane) * 4);
        f.e[h] = 0;
      }
    }
  }

  template <bool kCoherent = false>
  __device__ static void load_x(XFrag& x, const uint16_t* xr, int t, bool valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      x.v[i] = valid ? ldx16<kCoherent>(xr + 64 * t + 8 * i) : make_uint4(0, 0, 0, 0);
  }

  template <int J>
  __device__ static uint32_t sub_index(const uint32_t (&rec)[NW]) {
    constexpr int bit = J * B, w = bit / 32, sh = bit % 32;
    uint32_t v;
    if constexpr (sh + B <= 32)
      v = rec[w] >> sh;
    else
      v = __funnelshift_r(rec[w], rec[w + 1], sh);
    return v & ((1u << B) - 1);
  }

  // BF16 scale of group (4t + G) of half h, duplicated into both halves of a word.
  // v2: (T[c] − (127 << 7) + (E << 7)) in both halves, as the sum of the table's doubled word and E's (the
  // sum of two doubled 16-bit values is the doubled sum, mod 2^32).
  template <int G>
  __device__ static uint32_t scale2(const Frag& f, int h, const int* st) {
    if constexpr (V == 2)
      return static_cast<uint32_t>(st[(f.sc[h] >> (4 * G)) & 15]) + f.e[h] * (0x10001u << 7);
    else
      return static_cast<uint32_t>(st[(f.sc[h] >> (8 * G)) & 255]) * 0x10001u;
  }

  // v2 with the default table T4_2oct8m: the scale's BF16 bits are 128·E + 16·c (format.md §6.2, the
  // table's own values), so scale2's table load becomes arithmetic: st[c] = 16·c·0x10001.
  template <int G>
  __device__ static uint32_t scale2_default(const Frag& f, int h) {
    static_assert(V == 2, "the default table is v2's");
    return ((f.sc[h] >> (4 * G)) & 15) * 0x100010u + f.e[h] * (0x10001u << 7);
  }

  // Decoded A-fragment words of sub-vector J: a0/a2 (row g), a1/a3 (row g+8).
  template <int J>
  __device__ static void decode(const Frag& f, const uint2* tab, int rep, uint32_t s0, uint32_t s1,
                                uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    uint2 e0, e1;
    if constexpr (kBytePlanes) {
      // Byte offset idx·256 + 8·rep in one byte permute: byte 0 = 8·rep, byte 1 = the sub-index byte.
      constexpr uint32_t sel = 0x5504u | ((J % 4) << 4);
      const char* t = reinterpret_cast<const char*>(tab) + (J & 1) * 128;
      const uint32_t r8 = static_cast<uint32_t>(rep) * 8;
      e0 = *reinterpret_cast<const uint2*>(t + __byte_perm(f.rec[0][J / 4], r8, sel));
      e1 = *reinterpret_cast<const uint2*>(t + __byte_perm(f.rec[1][J / 4], r8, sel));
    } else {
      constexpr int tb = (J & 1) << B;
      e0 = tab[(tb + sub_index<J>(f.rec[0])) * kRep + rep];
      e1 = tab[(tb + sub_index<J>(f.rec[1])) * kRep + rep];
    }
    a0 = hmul2_bits(e0.x, s0);
    a2 = hmul2_bits(e0.y, s0);
    a1 = hmul2_bits(e1.x, s1);
    a3 = hmul2_bits(e1.y, s1);
  }

  // kDefaultTable: the scales by scale2_default (only for a v2 matrix whose table is the default).
  template <int G, int NT, bool kDefaultTable = false>
  __device__ static void mma_group(const Frag& f, const XFrag (&x)[NT], float (&acc)[NT][4], const uint2* tab,
                                   const int* st, int rep) {
    uint32_t s0, s1;
    if constexpr (kDefaultTable)
      s0 = scale2_default<G>(f, 0), s1 = scale2_default<G>(f, 1);
    else
      s0 = scale2<G>(f, 0, st), s1 = scale2<G>(f, 1, st);
#define GRIDQ_CB_STEP(JJ)                                                                                   \
  {                                                                                                         \
    constexpr int J = 4 * G + JJ;                                                                           \
    uint32_t a0, a1, a2, a3;                                                                                \
    decode<J>(f, tab, rep, s0, s1, a0, a1, a2, a3);                                                         \
    _Pragma("unroll") for (int nt = 0; nt < NT; ++nt) mma_bf16(                                             \
        acc[nt], a0, a1, a2, a3, word(x[nt].v[J / 2], (J % 2) * 2), word(x[nt].v[J / 2], (J % 2) * 2 + 1)); \
  }
    GRIDQ_CB_STEP(0) GRIDQ_CB_STEP(1) GRIDQ_CB_STEP(2) GRIDQ_CB_STEP(3)
#undef GRIDQ_CB_STEP
  }

  template <int NT>
  __device__ static void mma(const Frag& f, const XFrag (&x)[NT], float (&acc)[NT][4], const void* smem,
                             int lane) {
    const uint2* tab = static_cast<const uint2*>(smem);
    const int* st = reinterpret_cast<const int*>(static_cast<const char*>(smem) + kScaleTabOff);
    const int rep = lane % kRep;
    mma_group<0>(f, x, acc, tab, st, rep);
    mma_group<1>(f, x, acc, tab, st, rep);
    mma_group<2>(f, x, acc, tab, st, rep);
    mma_group<3>(f, x, acc, tab, st, rep);
  }
};

}  // namespace gridq::cuda::detail

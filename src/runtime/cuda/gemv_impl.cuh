// The GEMV engine shared by every weight format.
//
// Work split: a weight matrix is a grid of units (16-row tile × K-slice, relayout.h). The units are numbered
// tile-major and cut into T equal contiguous ranges, one per warp (T = all warps of a single-wave grid), so
// every warp streams the same number of bytes whatever the shape. A tile that falls into one warp's range is
// finished by that warp; a tile split between warps is finished by the last one to arrive (atomic counter),
// which sums the partials of all its warps in warp order: the result does not depend on timing.
//
// Per unit a lane holds rows g and g+8 of the tile (g = lane/4) and a contiguous K-run of them; the tensor
// core (mma.sync, M = 16 weight rows, N = 8 tokens) does the dot products. Decoders (Dec*) turn a unit's
// bytes into BF16 or E4M3 A-fragments; the engine handles loads, prefetch, split-K and the epilogues.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/grid_sync.cuh"
#include "runtime/cuda/kparams.h"

namespace gridq::cuda::detail {

inline constexpr int kWarpsPerBlock = 8;
inline constexpr int kThreads = kWarpsPerBlock * 32;
inline constexpr int kThreadsPerBlock = kThreads;

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
        if (i < kTotal) v[j] = __ldg(cb + i / kRep);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + j * nt + static_cast<int>(threadIdx.x);
        if (i < kTotal) tab[i] = v[j];
      }
    }
    int* st = reinterpret_cast<int*>(static_cast<char*>(smem) + kScaleTabOff);
    if constexpr (V == 2) {
      if (threadIdx.x < 16) st[threadIdx.x] = p.stab[threadIdx.x];
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
  template <int G>
  __device__ static uint32_t scale2(const Frag& f, int h, const int* st) {
    uint32_t s;
    if constexpr (V == 2)
      s = static_cast<uint32_t>(st[(f.sc[h] >> (4 * G)) & 15] + static_cast<int>(f.e[h] << 7));
    else
      s = static_cast<uint32_t>(st[(f.sc[h] >> (8 * G)) & 255]);
    return s * 0x10001u;
  }

  // Decoded A-fragment words of sub-vector J: a0/a2 (row g), a1/a3 (row g+8).
  template <int J>
  __device__ static void decode(const Frag& f, const uint2* tab, int rep, uint32_t s0, uint32_t s1,
                                uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
    constexpr int tb = (J & 1) << B;
    uint2 e0 = tab[(tb + sub_index<J>(f.rec[0])) * kRep + rep];
    uint2 e1 = tab[(tb + sub_index<J>(f.rec[1])) * kRep + rep];
    a0 = hmul2_bits(e0.x, s0);
    a2 = hmul2_bits(e0.y, s0);
    a1 = hmul2_bits(e1.x, s1);
    a3 = hmul2_bits(e1.y, s1);
  }

  template <int G, int NT>
  __device__ static void mma_group(const Frag& f, const XFrag (&x)[NT], float (&acc)[NT][4], const uint2* tab,
                                   const int* st, int rep) {
    uint32_t s0 = scale2<G>(f, 0, st), s1 = scale2<G>(f, 1, st);
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

// ---------------------------------------------------------------------------------------------------------
// Unit cursor: which tile / K-slice / slot a unit index is, and where its bytes are.

template <class Dec, int MODE>
struct Cursor {
  int tile, q, slot, s, r;
  const uint8_t* w;  // this unit's bytes (kSwiglu: the gate tile; the up tile is + R·S units)

  __device__ void set(unsigned u, const KParams& p, int Sq) {
    if constexpr (MODE == kMoeDown) {
      tile = r = static_cast<int>(u / static_cast<unsigned>(Sq));
      q = static_cast<int>(u % static_cast<unsigned>(Sq));
      slot = q / p.S;
      s = q % p.S;
    } else {
      tile = static_cast<int>(u / static_cast<unsigned>(p.S));
      q = s = static_cast<int>(u % static_cast<unsigned>(p.S));
      slot = tile / p.R;
      r = tile % p.R;
    }
    rebase(p);
  }
  __device__ void rebase(const KParams& p) {
    long long e = 0;
    if (p.slot_expert != nullptr && slot < p.max_slots) e = __ldg(p.slot_expert + slot);
    w = p.w + p.expert_stride * e + (static_cast<long long>(r) * p.S + s) * Dec::kUnitBytes;
  }
  __device__ void next(const KParams& p, int Sq) {
    ++s;
    ++q;
    if constexpr (MODE == kMoeDown) {
      if (s == p.S) {
        s = 0;
        ++slot;
        if (q == Sq) {
          q = 0;
          slot = 0;
          ++tile;
          ++r;
        }
        rebase(p);
        return;
      }
    } else {
      if (s == p.S) {
        s = 0;
        q = 0;
        ++tile;
        if (++r == p.R) {
          r = 0;
          ++slot;
          rebase(p);
          return;
        }
      }
    }
    w += Dec::kUnitBytes;
  }
};

// ---------------------------------------------------------------------------------------------------------

template <int NV>
__device__ __forceinline__ void zero(float (&a)[NV]) {
#pragma unroll
  for (int i = 0; i < NV; ++i) a[i] = 0.0f;
}

// Warp w's units are [w·U/T, (w+1)·U/T). The host keeps U·T < 2^32, so 32-bit unsigned math suffices (64-bit
// division is a long software sequence).
__device__ __forceinline__ unsigned range_start(unsigned w, unsigned U, unsigned T) { return w * U / T; }
__device__ __forceinline__ unsigned warp_of(unsigned u, unsigned U, unsigned T) {
  return ((u + 1) * T - 1) / U;
}

// Depth of the per-warp shared-memory ring and the kernel's dynamic shared memory (tables + rings).
template <class Dec, int MODE>
constexpr int ring_stages() {
  return MODE == kSwiglu && Dec::kUnitBytes >= 2048 ? 3 : 4;
}
template <class Dec, int MODE>
constexpr int kernel_smem_bytes() {
  return Dec::kSmemBytes +
         kWarpsPerBlock * ring_stages<Dec, MODE>() * (MODE == kSwiglu ? 2 : 1) * Dec::kUnitBytes;
}

// SwiGLU of one fragment column: gate g0/g1 and up u0/u1 of rows g and g+8 of a 16-row tile →
// out = bf16(silu(bf16(gate))·bf16(up)); with qdq, then the FP4 activation QDQ (format.md §14.1) over the
// tile's 16 rows, which are one QDQ group: the 8 lanes with this t reduce by xor 4, 8, 16. Warp-collective
// (every lane calls it, qdq uniform); shared by the GEMV's kSwiglu epilogue and the grouped experts.
__device__ __forceinline__ void swiglu_column(float g0, float g1, float u0, float u1, bool qdq,
                                              uint16_t (&out)[2]) {
  const float hv[2] = {bf16_round(__fmul_rn(silu_f32(bf16_round(g0)), bf16_round(u0))),
                       bf16_round(__fmul_rn(silu_f32(bf16_round(g1)), bf16_round(u1)))};
  out[0] = f32_to_bf16_bits(hv[0]);
  out[1] = f32_to_bf16_bits(hv[1]);
  if (!qdq) return;
  float a = fmaxf(fabsf(hv[0]), fabsf(hv[1]));
  int nan = isnan(hv[0]) || isnan(hv[1]);
#pragma unroll
  for (int m = 4; m < 32; m <<= 1) {
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, m));
    nan |= __shfl_xor_sync(0xffffffffu, nan, m);
  }
  const float s = fp4_group_scale(a);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) out[hh] = nan ? uint16_t{0x7FC0} : fp4_qdq_elem(hv[hh], s);
}

// End of a tile's K-run in one warp: a tile wholly inside the warp's range (`full`) goes straight to the
// epilogue; a split tile posts its FP32 partial (slot `first_slot`: 0 = the warp's first tile, 1 = its last)
// and the last of its warps to arrive sums all parts in warp order and runs the epilogue. `gw` is the warp's
// index among the T warps that split U units; every memory access that another block or a later phase may
// see goes through L2 (st.cg / ld.cg), so the same code serves the single kernel and the persistent chain.
template <int NT, int MODE, int NO>
__device__ __forceinline__ void finish_tile(const KParams& p, float (&v)[NO], unsigned tile, bool full,
                                            int first_slot, unsigned gw, unsigned U, unsigned T, unsigned uSq,
                                            int lane) {
  const int g = lane >> 2, t = lane & 3, M = p.M;
  bool do_epilogue = full;
  if (!full) {
    const int slot = first_slot;
    float* part = p.partials + (static_cast<size_t>(gw) * 2 + slot) * NO * 32;
#pragma unroll
    for (int i = 0; i < NO; ++i) __stcg(part + i * 32 + lane, v[i]);
    // Lane 0 publishes the warp's partial (ordered before it by __syncwarp) with a release RMW; the last
    // arriver's acquire makes every part visible to it. No full fences: they also wait for the warp's
    // earlier loads still in flight.
    __syncwarp();
    int old = 0;
    if (lane == 0)
      old = static_cast<int>(atom_add_acq_rel_gpu(reinterpret_cast<unsigned*>(p.counters + tile), 1));
    old = __shfl_sync(0xffffffffu, old, 0);
    const unsigned wf = warp_of(tile * uSq, U, T), wl = warp_of(tile * uSq + uSq - 1, U, T);
    // Warps in [wf, wl] with a non-empty range all hold a part of this tile (empty ranges only occur when
    // a MoE launch has fewer units than warps).
    int nparts = 0;
    for (unsigned w = wf; w <= wl; ++w) nparts += range_start(w, U, T) < range_start(w + 1, U, T);
    if (old == nparts - 1) {
      __syncwarp();  // the other lanes' partial loads are ordered after lane 0's acquire
#pragma unroll
      for (int i = 0; i < NO; ++i) v[i] = 0.0f;
      // Sum the parts in warp order (deterministic); the loads of a batch are independent, so a batch
      // costs one L2 round trip.
      constexpr int kB = NO <= 8 ? 8 : 4;
      for (unsigned w0 = wf; w0 <= wl; w0 += kB) {
        float buf[kB][NO];
#pragma unroll
        for (int j = 0; j < kB; ++j) {
          const unsigned w = w0 + j;
          const unsigned ws = range_start(w, U, T);
          const bool ok = w <= wl && ws < range_start(w + 1, U, T);
          const int ps = tile == ws / uSq ? 0 : 1;
          const float* src = p.partials + (static_cast<size_t>(w) * 2 + ps) * NO * 32;
#pragma unroll
          for (int i = 0; i < NO; ++i) buf[j][i] = ok ? __ldcg(src + i * 32 + lane) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kB; ++j)
#pragma unroll
          for (int i = 0; i < NO; ++i) v[i] += buf[j][i];
      }
      if (lane == 0) p.counters[tile] = 0;
      do_epilogue = true;
    }
  }
  if (do_epilogue) {
    // ---- epilogues. Fragment: v[nt*4 + i]: row g + 8·(i >> 1), token 8·nt + 2t + (i & 1).
    if constexpr (MODE == kStore) {
      const int rbase = static_cast<int>(tile) * 16;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = 8 * nt + 2 * t + (i & 1), row = rbase + g + 8 * (i >> 1);
          if (n >= M) continue;
          float val = v[nt * 4 + i];
          if (p.row_scale) val = __fmul_rn(__fmul_rn(__ldcg(p.xscale + n), p.row_scale[row]), val);
          const long long o = static_cast<long long>(n) * p.rows + row;
          if (p.y_f32) {
            float* yo = static_cast<float*>(p.y) + o;
            *yo = p.y_accum ? __fadd_rn(*yo, val) : val;
          } else
            static_cast<uint16_t*>(p.y)[o] = f32_to_bf16_bits(val);
        }
    } else if constexpr (MODE == kSwiglu) {
      const int slot = static_cast<int>(tile / p.R), r = static_cast<int>(tile % p.R);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {  // token column 2t + c
          const int n = 8 * nt + 2 * t + c;
          uint16_t out[2];
          swiglu_column(v[nt * 4 + c], v[nt * 4 + 2 + c], v[NT * 4 + nt * 4 + c], v[NT * 4 + nt * 4 + 2 + c],
                        p.qdq_fp4 != 0, out);
          if (n < M) {
            uint16_t* h =
                static_cast<uint16_t*>(p.y) + (static_cast<long long>(slot) * M + n) * p.rows + r * 16;
            h[g] = out[0];
            h[g + 8] = out[1];
          }
        }
    } else {  // kMoeDown
      const int rbase = static_cast<int>(tile) * 16;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = 8 * nt + 2 * t + (i & 1), row = rbase + g + 8 * (i >> 1);
          if (n >= M) continue;
          const long long o = static_cast<long long>(n) * p.rows + row;
          float val = __fmul_rn(p.out_scale, v[nt * 4 + i]);
          if (p.add) val = __fadd_rn(val, __ldcg(p.add + o));
          static_cast<uint16_t*>(p.y)[o] = f32_to_bf16_bits(val);
        }
    }
  }
}

template <class Dec, int NT, int MODE>
__device__ __forceinline__ void gemv_body(const KParams& p, unsigned char* smem) {
  constexpr int NP = MODE == kSwiglu ? 2 : 1;  // tiles per unit
  constexpr int NV = NP * NT * 4;              // accumulator floats per lane
  constexpr int kPD = (16384 / (Dec::kUnitBytes * NP)) > 1 ? 16384 / (Dec::kUnitBytes * NP) : 1;
  const bool stamp = p.trace != nullptr && threadIdx.x == 0;
  if (stamp) p.trace[blockIdx.x * 4] = global_timer_ns();

  Dec::init_smem(smem, p);
  __syncthreads();
  if (stamp) p.trace[blockIdx.x * 4 + 1] = global_timer_ns();
  pdl_launch_dependents();

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const unsigned T = gridDim.x * kWarpsPerBlock;
  const unsigned gw = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  const bool moe = p.slot_expert != nullptr;

  int nslots = 1;
  if (moe) {
    pdl_wait();
    nslots = *p.nslots;
  }
  const int Sq = MODE == kMoeDown ? nslots * p.S : p.S;
  const unsigned tiles = MODE == kMoeDown ? p.R : static_cast<unsigned>(nslots) * p.R;
  const unsigned U = tiles * Sq;
  const unsigned u0 = range_start(gw, U, T), u1 = range_start(gw + 1, U, T);
  const long long RSu = static_cast<long long>(p.R) * p.S * Dec::kUnitBytes;  // gate -> up offset

  // L2 prefetch runs kPD units ahead of the loads; dense weights do not depend on the previous kernel, so
  // the first kPD units are requested before waiting for it.
  Cursor<Dec, MODE> pc;
  unsigned pu = p.l2_prefetch ? u0 : u1;
  if (pu < u1) {
    pc.set(u0, p, Sq);
    for (; pu < u1 && pu < u0 + kPD; ++pu) {
      if (lane == 0) {
        prefetch_l2(pc.w, Dec::kUnitBytes);
        if (NP == 2) prefetch_l2(pc.w + RSu, Dec::kUnitBytes);
      }
      pc.next(p, Sq);
    }
  }
  // Weight units stream through a per-warp ring of kStages shared-memory buffers filled by cp.async, so
  // kStages-1 units per warp are in flight while one is decoded. Each lane copies 16-byte chunks; after the
  // group completes the warp synchronises and every lane reads its fragment from the stage.
  constexpr int kStages = ring_stages<Dec, MODE>();
  constexpr int kStageBytes = NP * Dec::kUnitBytes;
  constexpr int kChunks = Dec::kUnitBytes / 16;
  uint8_t* ring = smem + Dec::kSmemBytes + (threadIdx.x >> 5) * kStages * kStageBytes;
  Cursor<Dec, MODE> ic;
  unsigned iu = u0;
  auto issue = [&]() {
    if (iu < u1) {
      uint8_t* dst = ring + ((iu - u0) % kStages) * kStageBytes;
      for (int c = lane; c < kChunks; c += 32) {
        cp_async16(dst + 16 * c, ic.w + 16 * c);
        if constexpr (NP == 2) cp_async16(dst + Dec::kUnitBytes + 16 * c, ic.w + RSu + 16 * c);
      }
      ic.next(p, Sq);
      ++iu;
    }
    cp_async_commit();
  };
  // Dense weights do not depend on the previous kernel: start the ring before waiting for it.
  if (u0 < u1) {
    ic.set(u0, p, Sq);
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue();
  }
  if (!moe) pdl_wait();
  if (stamp) p.trace[blockIdx.x * 4 + 2] = global_timer_ns();
  if (u0 >= u1) return;

  const int M = p.M;
  float acc[NV], tot[NT * 4];
  zero(acc);
  if constexpr (MODE == kMoeDown) zero(tot);
  Cursor<Dec, MODE> cc;
  cc.set(u0, p, Sq);
  Cursor<Dec, MODE> nc = cc;
  typename Dec::Frag cur[NP];
  // Activations of a unit, token n = 8·nt + g; loaded one unit ahead.
  auto load_x = [&](const Cursor<Dec, MODE>& c, typename Dec::XFrag(&xf)[NT]) {
    const long long xoff = (MODE == kMoeDown ? static_cast<long long>(c.slot) * M * p.K : 0) +
                           static_cast<long long>(c.s) * Dec::kUnitK;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = 8 * nt + g;
      if constexpr (std::is_same_v<Dec, DecFP8>)
        Dec::load_x(xf[nt], static_cast<const uint8_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t,
                    n < M);
      else
        Dec::load_x(xf[nt], static_cast<const uint16_t*>(p.x) + xoff + static_cast<long long>(n) * p.K, t,
                    n < M);
    }
  };
  typename Dec::XFrag xf[NT], xn[NT];
  load_x(cc, xf);
  unsigned seg_begin = u0;
  const unsigned first_tile = u0 / static_cast<unsigned>(Sq);

  for (unsigned u = u0; u < u1; ++u) {
    __syncwarp();  // every lane has read the stage that the next issue overwrites
    issue();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    {
      const uint8_t* st = ring + ((u - u0) % kStages) * kStageBytes;
      Dec::load(cur[0], st, lane);
      if constexpr (NP == 2) Dec::load(cur[1], st + Dec::kUnitBytes, lane);
    }
    if (u + 1 < u1) {
      nc.next(p, Sq);
      load_x(nc, xn);
    }
    if (pu < u1) {
      if (lane == 0) {
        prefetch_l2(pc.w, Dec::kUnitBytes);
        if (NP == 2) prefetch_l2(pc.w + RSu, Dec::kUnitBytes);
      }
      pc.next(p, Sq);
      ++pu;
    }
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) {
      float(&a)[NT][4] = *reinterpret_cast<float(*)[NT][4]>(acc + pi * NT * 4);
      Dec::template mma<NT>(cur[pi], xf, a, smem, lane);
    }

    const bool tile_end = cc.q == Sq - 1 || u + 1 == u1;
    if constexpr (MODE == kMoeDown) {
      if (cc.s == p.S - 1 || u + 1 == u1) {  // end of this slot's run: fold with the routing weights
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = 8 * nt + 2 * t + (i & 1);
            const float wgt = n < M ? __ldg(p.slot_weight + static_cast<long long>(cc.slot) * M + n) : 0.0f;
            tot[nt * 4 + i] = fmaf(wgt, acc[nt * 4 + i], tot[nt * 4 + i]);
            acc[nt * 4 + i] = 0.0f;
          }
      }
    }
    if (tile_end) {
      const unsigned tile = static_cast<unsigned>(cc.tile);
      const unsigned uSq = static_cast<unsigned>(Sq);
      const bool full = seg_begin == tile * uSq && cc.q == Sq - 1;
      if constexpr (MODE == kMoeDown)
        finish_tile<NT, MODE>(p, tot, tile, full, tile == first_tile ? 0 : 1, gw, U, T, uSq, lane);
      else
        finish_tile<NT, MODE>(p, acc, tile, full, tile == first_tile ? 0 : 1, gw, U, T, uSq, lane);
      zero(acc);
      if constexpr (MODE == kMoeDown) zero(tot);
      seg_begin = u + 1;
    }
    cc = nc;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xf[nt] = xn[nt];
  }
}

template <class Dec, int NT, int MODE>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const KParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  gemv_body<Dec, NT, MODE>(p, smem);
  if (p.trace != nullptr && (threadIdx.x & 31) == 0)
    atomicMax(p.trace + blockIdx.x * 4 + 3, global_timer_ns());
}

}  // namespace gridq::cuda::detail

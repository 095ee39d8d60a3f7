// The wide GEMV ("GEMM") for steps of more than 16 rows: the GEMV's weights, decoders and epilogues
// (gemv_impl.cuh) with blocks of NB = 8·NT token rows staged in shared memory, so a weight unit is decoded
// once per NB rows instead of once per 16.
//
// Bit-identical to the GEMV, row for row: the GEMV cuts a matrix's units (tile-major) into T equal ranges,
// one per warp (T from gemv_grid, a function of the matrix alone), and a tile's value is the sum, from +0 and
// in warp order, of its parts' accumulators (one part: the accumulator itself). Here one warp walks a
// tile's whole K-run for NB rows, one mma chain per token column in unit order, folds its accumulator into
// the running sum exactly where a GEMV warp range begins, and hands the same value to the same epilogue
// (finish_tile with the tile complete). mma columns are independent, so a row's bits do not depend on the
// other rows of its block either.
//
// CTA = 8 warps = 8 consecutive tiles × one token block. Per K-unit a CTA-wide cp.async stage holds the 8
// tiles' weight units and the block's activation slice (rows padded so the lanes' fragment loads hit
// distinct banks); kGemmStages stages in flight.
//
// Split-K (SPLIT, a step of few token blocks: every decode step past 16 rows). Unsplit, such a step has only
// tile groups × token blocks CTAs (o_proj of Laguna-S-2.1 at 64 rows: 24 CTAs on 132 SMs, 190 GB/s). When the
// GEMV's ranges are tile-aligned (tile_aligned_blocks: T = R·P), each CTA takes one of the P parts of its
// tiles' K-runs, exactly a GEMV warp's range: its accumulator is that warp's part, posted to the workspace,
// and the last CTA of a tile to arrive sums the P parts from +0 in order, as the GEMV's finisher and the
// unsplit GEMM's in-warp fold both do. The same bits, P times the CTAs. Where that would be more CTAs than
// fit at once (the shared expert's SwiGLU at 64 rows: 24 parts of 2 K-steps, two token blocks), a CTA takes
// `per` consecutive parts (kSwiglu) and posts each as it ends (accumulated from +0 like the others): the same
// posts, the same fold, one wave of longer pipelines.
#pragma once

#include "runtime/cuda/gemv_impl.cuh"

namespace gridq::cuda::detail {

inline constexpr int kGemmStages = 3;

// Activation slice geometry per decoder: bytes of one row's unit (kXB), the row pitch in shared memory and
// the stride of a lane quarter t inside a row (16-byte fragment loads of a quarter-warp phase hit distinct
// banks: see the comment at the top).
template <class Dec>
struct XSlice;
template <>
struct XSlice<DecBF16> {
  static constexpr int kXB = 128, kPitch = 144, kTStride = 32;
};
template <>
struct XSlice<DecFP8> {
  static constexpr int kXB = 64, kPitch = 64, kTStride = 16;
};
template <int K, int V>
struct XSlice<DecCB<K, V>> {
  static constexpr int kXB = 512, kPitch = 576, kTStride = 144;
};

template <int MODE>
constexpr int gemm_nt() {
  return MODE == kSwiglu ? 4 : 8;
}
template <class Dec, int MODE>
constexpr int gemm_stage_bytes() {
  constexpr int NP = MODE == kSwiglu ? 2 : 1;
  return kWarpsPerBlock * NP * Dec::kUnitBytes + 8 * gemm_nt<MODE>() * XSlice<Dec>::kPitch;
}
template <class Dec, int MODE>
constexpr int gemm_smem_bytes() {
  return Dec::kSmemBytes + kGemmStages * gemm_stage_bytes<Dec, MODE>();
}

struct GemmParams {
  KParams kp;
  unsigned gemv_warps;  // T of the GEMV over this matrix (gemv_grid · kWarpsPerBlock)
  int tile_groups;      // ceil(R / kWarpsPerBlock)
  int token_blocks;     // ceil(M / NB)
  int parts;            // SPLIT: P = T / R K-parts a tile; else 1
  int per;              // SPLIT kSwiglu: consecutive parts a CTA takes (ceil(P / per) CTAs a tile); else 1
};

// Floats of one token block's split-K partials: a part's accumulators (NO floats a lane) per GEMV warp.
template <int MODE>
constexpr long long gemm_split_floats(long long gemv_warps) {
  return gemv_warps * (MODE == kSwiglu ? 2 : 1) * gemm_nt<MODE>() * 4 * 32;
}

// SPLIT: post this warp's part (GEMV warp gw of `parts` for the tile) and, in the last of the tile's CTAs to
// arrive, sum all parts from +0 in part order into v; false in the others (they are done).
template <int NO>
__device__ __forceinline__ bool gemm_fold_parts(float (&v)[NO], float* partials, int* counter, unsigned gw0,
                                                int part, int parts, int lane) {
  float* mine = partials + (static_cast<size_t>(gw0) + part) * NO * 32;
#pragma unroll
  for (int i = 0; i < NO; ++i) __stcg(mine + i * 32 + lane, v[i]);
  // Release by lane 0 after the warp's stores, acquire by the last arriver (as finish_tile).
  __syncwarp();
  int old = 0;
  if (lane == 0) old = static_cast<int>(atom_add_acq_rel_gpu(reinterpret_cast<unsigned*>(counter), 1));
  old = __shfl_sync(0xffffffffu, old, 0);
  if (old != parts - 1) return false;
  __syncwarp();
#pragma unroll
  for (int i = 0; i < NO; ++i) v[i] = 0.0f;
  for (int j = 0; j < parts; ++j) {
    const float* src = partials + (static_cast<size_t>(gw0) + j) * NO * 32;
    float buf[NO];
#pragma unroll
    for (int i = 0; i < NO; ++i) buf[i] = __ldcg(src + i * 32 + lane);
#pragma unroll
    for (int i = 0; i < NO; ++i) v[i] += buf[i];
  }
  if (lane == 0) *counter = 0;
  return true;
}

// One unit's products for NT token tiles of one tile: acc[nt] += W_unit · x(nt) for nt < live (warp-uniform;
// the tiles past it hold no rows). x rows at xs (row 8nt + g, quarter t). CB decodes each group of 4
// sub-vectors once for all the tiles.
template <class Dec, int NT>
__device__ __forceinline__ void gemm_unit(const typename Dec::Frag& f, const uint8_t* xs, float (&acc)[NT][4],
                                          const void* tab_smem, int lane, int live = NT) {
  using X = XSlice<Dec>;
  const int g = lane >> 2, t = lane & 3;
  const uint8_t* xl = xs + g * X::kPitch + t * X::kTStride;
  if constexpr (Dec::kUnitK == 256) {
    const uint2* tab = static_cast<const uint2*>(tab_smem);
    const int* st = reinterpret_cast<const int*>(static_cast<const char*>(tab_smem) + Dec::kScaleTabOff);
    const int rep = lane % Dec::kRep;
#define GRIDQ_GEMM_GROUP(G)                                                                                \
  {                                                                                                        \
    const uint32_t s0 = Dec::template scale2<G>(f, 0, st), s1 = Dec::template scale2<G>(f, 1, st);         \
    uint32_t a[4][4];                                                                                      \
    Dec::template decode<4 * G + 0>(f, tab, rep, s0, s1, a[0][0], a[0][1], a[0][2], a[0][3]);              \
    Dec::template decode<4 * G + 1>(f, tab, rep, s0, s1, a[1][0], a[1][1], a[1][2], a[1][3]);              \
    Dec::template decode<4 * G + 2>(f, tab, rep, s0, s1, a[2][0], a[2][1], a[2][2], a[2][3]);              \
    Dec::template decode<4 * G + 3>(f, tab, rep, s0, s1, a[3][0], a[3][1], a[3][2], a[3][3]);              \
    _Pragma("unroll") for (int nt = 0; nt < NT; ++nt) {                                                    \
      if (nt >= live) break;                                                                               \
      const uint8_t* xr = xl + nt * 8 * X::kPitch + 32 * G;                                                \
      const uint4 x0 = *reinterpret_cast<const uint4*>(xr), x1 = *reinterpret_cast<const uint4*>(xr + 16); \
      mma_bf16(acc[nt], a[0][0], a[0][1], a[0][2], a[0][3], x0.x, x0.y);                                   \
      mma_bf16(acc[nt], a[1][0], a[1][1], a[1][2], a[1][3], x0.z, x0.w);                                   \
      mma_bf16(acc[nt], a[2][0], a[2][1], a[2][2], a[2][3], x1.x, x1.y);                                   \
      mma_bf16(acc[nt], a[3][0], a[3][1], a[3][2], a[3][3], x1.z, x1.w);                                   \
    }                                                                                                      \
  }
    GRIDQ_GEMM_GROUP(0) GRIDQ_GEMM_GROUP(1) GRIDQ_GEMM_GROUP(2) GRIDQ_GEMM_GROUP(3)
#undef GRIDQ_GEMM_GROUP
  } else {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= live) break;
      typename Dec::XFrag xf[1];
      const uint8_t* xr = xl + nt * 8 * X::kPitch;
      if constexpr (X::kXB == 128) {
        xf[0].v[0] = *reinterpret_cast<const uint4*>(xr);
        xf[0].v[1] = *reinterpret_cast<const uint4*>(xr + 16);
      } else {
        xf[0].v = *reinterpret_cast<const uint4*>(xr);
      }
      float(&a1)[1][4] = *reinterpret_cast<float(*)[1][4]>(&acc[nt][0]);
      Dec::template mma<1>(f, xf, a1, tab_smem, lane);
    }
  }
}

// MINB: CTAs an SM is built for. A prefill step's GEMM is latency-bound: FP8's and BF16's stages are small,
// so registers decide the occupancy, and two CTAs (≤ 128 registers) give each scheduler 4 warps to hide the
// mma and load latencies (ncu at 1 CTA: over half the cycles had no eligible warp; 1.37 → 1.05 ms for a
// 2048-row FP8 qkv). A decode-sized one (one token block) streams weights and is faster unconstrained
// (batch 64: 48.6 → 52.9 ms a step with 2). CB's decoder tables and stages fill the shared memory of one.
// The arithmetic is the same either way, so the choice is free.
template <class Dec, int MODE, int MINB, bool SPLIT>
__global__ void __launch_bounds__(kThreads, MINB) gemm_kernel(const GemmParams gp) {
  constexpr int NT = gemm_nt<MODE>(), NB = 8 * NT;
  constexpr int NP = MODE == kSwiglu ? 2 : 1;
  constexpr int kStageBytes = gemm_stage_bytes<Dec, MODE>();
  constexpr int kWBytes = kWarpsPerBlock * NP * Dec::kUnitBytes;
  using X = XSlice<Dec>;
  extern __shared__ __align__(16) unsigned char smem[];
  const KParams& p = gp.kp;
  Dec::init_smem(smem, p);
  uint8_t* stages = smem + Dec::kSmemBytes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group = blockIdx.x % gp.tile_groups;
  const int block = SPLIT ? (blockIdx.x / gp.tile_groups) % gp.token_blocks : blockIdx.x / gp.tile_groups;
  // SPLIT: this CTA's parts [part0, part1) of the tile's K-run; `part` is the one being accumulated. Only the
  // SwiGLU GEMM takes several (plan_gemm): the posts inside the loop cost the FP8 split kernel a spill.
  constexpr bool kMulti = SPLIT && MODE == kSwiglu;
  const int part0 = SPLIT ? static_cast<int>(blockIdx.x) / (gp.tile_groups * gp.token_blocks) * gp.per : 0;
  const int part1 = SPLIT ? min(part0 + gp.per, gp.parts) : 1;
  int part = part0;
  const int tile0 = group * kWarpsPerBlock, n0 = block * NB;
  const int rows_here = min(NB, p.M - n0);
  const int S = p.S;
  // This CTA's K-units [s0, s0 + S_run): the whole run, or (SPLIT) parts part0 .. part1 - 1 of P (GEMV warps'
  // ranges); a part ends before local step part_end.
  const int s0 = SPLIT ? part0 * S / gp.parts : 0;
  const int S_run = SPLIT ? part1 * S / gp.parts - s0 : S;
  int part_end = SPLIT ? (part0 + 1) * S / gp.parts - s0 : S_run;
  const long long RSu = static_cast<long long>(p.R) * S * Dec::kUnitBytes;  // gate -> up tile
  // Weights do not depend on the previous kernel: the first stages' weight copies start before waiting.
  // Each thread's chunks of a stage are fixed: their sources and shared-memory offsets are formed once, and a
  // step moves the sources by one unit (a tile's K-units are contiguous) or one activation slice. Forming
  // them per chunk and step (64-bit products, divisions by the chunk counts, the generic-to-shared
  // conversion) was most of the prefill GEMM's K-step loop: ≈ 350 of its 724 SASS instructions.
  constexpr int kWChunks = kWBytes / 16, kWPer = (kWChunks + kThreads - 1) / kThreads;
  constexpr int kRowChunks = X::kXB / 16, kQ = X::kXB / 4;
  constexpr int kXChunks = NB * kRowChunks, kXPer = (kXChunks + kThreads - 1) / kThreads;
  const uint32_t stage0 = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  const uint8_t* w_src[kWPer];  // this thread's weight chunk j at local step 0 (nullptr: none)
  uint32_t w_dst[kWPer];        // its offset in a stage
#pragma unroll
  for (int j = 0; j < kWPer; ++j) {
    const int c = static_cast<int>(threadIdx.x) + kThreads * j;
    const int wt = c / (NP * Dec::kUnitBytes / 16), rem = c % (NP * Dec::kUnitBytes / 16);
    const int pi = rem / (Dec::kUnitBytes / 16), ch = rem % (Dec::kUnitBytes / 16);
    const bool ok = c < kWChunks && tile0 + wt < p.R;
    w_src[j] = ok ? p.w + (static_cast<long long>(tile0 + wt) * S + s0) * Dec::kUnitBytes + pi * RSu + 16 * ch
                  : nullptr;
    w_dst[j] = static_cast<uint32_t>((wt * NP + pi) * Dec::kUnitBytes + 16 * ch);
  }
  const uint8_t* x_src[kXPer];  // this thread's activation chunk j at local step 0 (nullptr: none)
  uint32_t x_dst[kXPer];
#pragma unroll
  for (int j = 0; j < kXPer; ++j) {
    const int c = static_cast<int>(threadIdx.x) + kThreads * j;
    const int n = c / kRowChunks, b = (c % kRowChunks) * 16;
    const bool ok = c < kXChunks && n < rows_here;
    x_src[j] = ok ? static_cast<const uint8_t*>(p.x) +
                        static_cast<long long>(n0 + n) * p.K * X::kXB / Dec::kUnitK +
                        static_cast<long long>(s0) * X::kXB + b
                  : nullptr;
    x_dst[j] = static_cast<uint32_t>(kWBytes + n * X::kPitch + (b / kQ) * X::kTStride + b % kQ);
  }
  auto issue_w = [&](int s) {  // local step s: K-unit s0 + s
    const uint32_t dst = stage0 + static_cast<uint32_t>((s % kGemmStages) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kWPer; ++j)
      if (w_src[j] != nullptr)
        cp_async16_s(dst + w_dst[j], w_src[j] + static_cast<long long>(s) * Dec::kUnitBytes);
  };
  auto issue_x = [&](int s) {
    const uint32_t dst = stage0 + static_cast<uint32_t>((s % kGemmStages) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kXPer; ++j)
      if (x_src[j] != nullptr) cp_async16_s(dst + x_dst[j], x_src[j] + static_cast<long long>(s) * X::kXB);
  };
  __syncthreads();  // the decoder tables
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < kGemmStages - 1; ++i)
    if (i < S_run) issue_w(i);
  pdl_wait();
#pragma unroll
  for (int i = 0; i < kGemmStages - 1; ++i) {
    if (i < S_run) issue_x(i);
    cp_async_commit();
  }

  const int tile = tile0 + warp;
  const bool active = tile < p.R;
  const unsigned U = static_cast<unsigned>(p.R) * S, T = gp.gemv_warps;
  unsigned u = static_cast<unsigned>(tile) * S + s0;
  unsigned nb = active ? range_start(warp_of(u, U, T) + 1, U, T) : 0;
  bool folded = false;
  float acc[NP][NT][4], sum[NP][NT][4];
  constexpr int NO = NP * NT * 4;
  static_assert(gemm_split_floats<MODE>(1) == NO * 32);
  // f(j, acc element, sum element) for every accumulator, j its index in the epilogue's order.
  auto each = [&](auto&& f) {
#pragma unroll
    for (int pi = 0; pi < NP; ++pi)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) f(pi * NT * 4 + nt * 4 + i, acc[pi][nt][i], sum[pi][nt][i]);
  };
  each([](int, float& a, float& sm) { a = sm = 0.0f; });
  // o = the warp's value of its tile so far, in the epilogue's order; acc restarts from +0 (the next part's).
  auto take = [&](float(&o)[NO]) {
    each([&](int j, float& a, float& sm) {
      o[j] = folded ? __fadd_rn(sm, a) : a;
      a = 0.0f;
    });
  };
  // SPLIT: post o as part `part` of the tile; true in the tile's last poster, o then the sum of all parts.
  auto post = [&](float(&o)[NO]) {
    return gemm_fold_parts<NO>(o, p.partials + block * gemm_split_floats<MODE>(T),
                               p.counters + static_cast<long long>(block) * p.R + tile,
                               static_cast<unsigned>(tile) * gp.parts, part, gp.parts, lane);
  };
  for (int s = 0; s < S_run; ++s) {
    // One barrier per K step: after it every thread's copies of stage s are visible and every warp is done
    // with stage s - 1, whose buffer then takes step s + kGemmStages - 1 while this one is computed.
    cp_async_wait<kGemmStages - 2>();
    __syncthreads();
    if (s + kGemmStages - 1 < S_run) {
      issue_w(s + kGemmStages - 1);
      issue_x(s + kGemmStages - 1);
    }
    cp_async_commit();
    if (active) {
      // SPLIT: the CTA's K-run is whole GEMV warp ranges (tile-aligned: range_start(r·P + j) = r·S +
      // ⌊j·S / P⌋, the part's s0), each posted as it ends, never summed in the warp: the fold and its 4·NT·NP
      // sums are compiled out (at 128 registers they made the split kernels spill inside the loop).
      if (!SPLIT && s > 0 && u == nb) {  // a GEMV warp's range starts here: fold the part
        each([](int, float& a, float& sm) {
          sm = __fadd_rn(sm, a);
          a = 0.0f;
        });
        folded = true;
        nb = range_start(warp_of(u, U, T) + 1, U, T);
      }
      const uint8_t* st = stages + (s % kGemmStages) * kStageBytes;
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) {
        typename Dec::Frag f;
        Dec::load(f, st + (warp * NP + pi) * Dec::kUnitBytes, lane);
        gemm_unit<Dec, NT>(f, st + kWBytes, acc[pi], smem, lane);
      }
      if (kMulti && s + 1 == part_end && s + 1 < S_run) {  // a part ends before this CTA's last: post it
        float w[NO];
        take(w);
        (void)post(w);  // never the tile's last post: this CTA's later parts are still to come
        ++part;
        part_end = (part + 1) * S / gp.parts - s0;
      }
    }
    ++u;
  }
  if (!active) return;
  float v[NO];
  take(v);
  if constexpr (SPLIT) {
    if (!post(v)) return;
  }
  // The GEMV's epilogue on this token block: rows n0 .. n0 + rows_here - 1.
  KParams q = p;
  q.M = rows_here;
  if constexpr (MODE == kSwiglu) {
    q.y = static_cast<uint16_t*>(p.y) + static_cast<long long>(n0) * p.rows;
  } else {
    q.y = p.y_f32 ? static_cast<void*>(static_cast<float*>(p.y) + static_cast<long long>(n0) * p.rows)
                  : static_cast<void*>(static_cast<uint16_t*>(p.y) + static_cast<long long>(n0) * p.rows);
    if (p.xscale) q.xscale = p.xscale + n0;
  }
  finish_tile<NT, MODE>(q, v, static_cast<unsigned>(tile), true, 0, 0, U, T, static_cast<unsigned>(S), lane);
}

}  // namespace gridq::cuda::detail

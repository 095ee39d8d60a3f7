// Routed experts for prefill-sized steps: the grouped experts (moe_grouped.cu) with an item of 16 tiles ×
// 64 of the expert's pairs on one CTA, so a weight unit is decoded once per 64 pairs instead of once per 8,
// and the products on warpgroup MMAs (wgmma.cuh), so the 64 pairs' activations are read from shared memory
// once per 4 tiles instead of once per tile (mma.sync: 16 warps read a unit's 32 KB slice 16 times, 512 KB
// a unit against 19 KB of weights).
//
// The same bits as moe_grouped.cu, pair for pair: each 16-row tile of a pair is one chain over the whole K,
// from +0, units in order, the unit's 16 sub-vector k16 steps in the GEMV's order, and a wgmma k16 step
// rounds as the mma.sync step (wgmma.cuh). A column's value does not depend on the other pairs of its block
// (nor on the garbage of a block's unused columns, which are never stored). Which kernel runs is therefore
// free: grouped_moe picks it by the step's pairs per expert.
//
// B's k slots must hold the K positions the decoder's A fragments give them (DecCB: slot pair 2t + 8c of
// step J is x word 32t + 2J + c of the unit). The activations therefore arrive with each 256-column unit's
// 128 words permuted (raw_permute_units; the down's h from raw_swiglu_pairs with perm): word w at
// unit_word_slot(w) = 4·(w % 32) + w / 32, so 16-byte chunk q = 2J + c of a row is the row's 16 bytes of core
// matrix c of step J, and one cp.async puts it in place: B is K-major with the 128-byte swizzle
// (wg_desc_sw128), chunk q of pair n in atom q / 8 (steps 4a .. 4a + 3), row n, slot (q % 8) ^ (n % 8).
//
// CTA = 16 warps = 4 warpgroups = 16 consecutive tiles (tile group) × 64 pairs. Per K-unit a cp.async
// stage holds the 64 pairs' slices as 4 swizzle atoms (64 pairs × 128 bytes each) and the 16 tiles' weight
// units; stages run one ahead across the CTA's items (item i, i + grid, …) in a ring of three, so the unit
// before the computed one may still be in the tensor cores.
#include "runtime/cuda/gemm_impl.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/moe_items.cuh"
#include "runtime/cuda/wgmma.cuh"

namespace gridq::cuda::detail {

namespace {

using Dec = DecCB<16, 2>;
constexpr int kNB = 64;  // pairs of an item (the wgmma's N)
// 16 warps (tiles) a CTA: the decoder tables (65 KB) allow one CTA an SM, and the decode's dependent integer
// chains need more than 2 warps a scheduler to hide their latency (ncu: with 8 warps and 3 stages, 72 % of
// cycles had no eligible warp, mostly fixed-latency dependencies).
constexpr int kWarps = kWideTiles, kThr = kWarps * 32, kBufs = 3;
constexpr int kSteps = Dec::kUnitK / 16;          // k16 steps a unit
constexpr int kAtomBytes = kNB * 128;             // 4 k16 steps of the 64 pairs: one 128-byte swizzle atom
constexpr int kXBytes = kSteps / 4 * kAtomBytes;  // the unit's activations (64 × 512 bytes)
constexpr int kWBytes = kWarps * Dec::kUnitBytes;
// B first, each stage 1024-byte aligned (the 128-byte swizzle's XOR pattern is taken from address bits 7-9).
constexpr int kStageBytes = (kXBytes + kWBytes + 1023) / 1024 * 1024;
static_assert(kNB == 64 && kWarps % 4 == 0 && kSteps == 16);

// The decoder tables (65 KB: the stages after them stay 1024-byte aligned), the stages, then the item and
// pair offsets: 226 KB at E = 1024.
constexpr int wide_smem_bytes(int E) { return Dec::kSmemBytes + kBufs * kStageBytes + 2 * (E + 1) * 4; }
static_assert(Dec::kSmemBytes % 1024 == 0 && wide_smem_bytes(1024) <= 227 * 1024);

// acc += this warp's tile unit (f) × the unit's 64 pair columns (B atoms at xb), on the warpgroup's MMAs.
// A group of 4 steps is decoded into one of two register sets while the other group's MMAs may still run:
// wg_wait<1> after each group leaves only that group in flight.
__device__ __forceinline__ void wide_unit(const Dec::Frag& f, uint32_t xb, float (&acc)[32],
                                          uint32_t (&a)[2][4][4], const unsigned char* smem, int lane) {
  const uint2* tab = reinterpret_cast<const uint2*>(smem);
  const int* st = reinterpret_cast<const int*>(smem + Dec::kScaleTabOff);
  const int rep = lane % Dec::kRep;
  // Step J: atom J / 4, 32 bytes on per step inside it (the swizzle applies to the addresses the MMA forms);
  // the start address field (bits 0-13, 16-byte units) does not carry: shared addresses stay below 2^18.
  const uint64_t d0 = wg_desc_sw128(xb);
#define GRIDQ_WIDE_GROUP(G)                                                                         \
  {                                                                                                 \
    const uint32_t s0 = Dec::template scale2<G>(f, 0, st), s1 = Dec::template scale2<G>(f, 1, st);  \
    uint32_t(&ag)[4][4] = a[(G) % 2];                                                               \
    Dec::template decode<4 * (G) + 0>(f, tab, rep, s0, s1, ag[0][0], ag[0][1], ag[0][2], ag[0][3]); \
    Dec::template decode<4 * (G) + 1>(f, tab, rep, s0, s1, ag[1][0], ag[1][1], ag[1][2], ag[1][3]); \
    Dec::template decode<4 * (G) + 2>(f, tab, rep, s0, s1, ag[2][0], ag[2][1], ag[2][2], ag[2][3]); \
    Dec::template decode<4 * (G) + 3>(f, tab, rep, s0, s1, ag[3][0], ag[3][1], ag[3][2], ag[3][3]); \
    wg_fence();                                                                                     \
    _Pragma("unroll") for (int i = 0; i < 4; ++i)                                                   \
        wgmma_bf16_n64(acc, ag[i], d0 + (G) * (kAtomBytes >> 4) + i * 2);                           \
    wg_commit();                                                                                    \
    wg_wait<1>();                                                                                   \
  }
  GRIDQ_WIDE_GROUP(0) GRIDQ_WIDE_GROUP(1) GRIDQ_WIDE_GROUP(2) GRIDQ_WIDE_GROUP(3)
#undef GRIDQ_WIDE_GROUP
}

// y[pair, row] FP32 (gate_up: the [2I, H] stacks' rows, gate then up; down: H) for every item of the launch.
// The activations kp.x are unit-permuted (raw_permute_units).
__global__ void __launch_bounds__(kThr, 1)
    grouped_wide_kernel(const ExpertParams p, int tile_groups, int gate_up) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const KParams& kp = p.kp;
  if (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) % 1024) __trap();  // the swizzle atoms' alignment
  Dec::init_smem(smem, kp);
  int *ioff, *poff;  // [E + 1] item offsets, [E + 1] pair offsets
  uint8_t* stages = smem + Dec::kSmemBytes;
  stage_offsets(p.grp, p.E, gate_up != 0, stages + kBufs * kStageBytes, ioff, poff);
  const int* pairs = p.grp + grp_pairs_off(p.E);
  const int n_items = ioff[p.E], S = kp.S, G = static_cast<int>(gridDim.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // Issue side: (item, unit) in order over the CTA's items, one ahead of the compute side. A thread copies
  // chunks q = 8·j + lane % 8 (j = 0..3) of one pair row xn = 4·warp + lane / 8: each 8 lanes read 128
  // contiguous bytes of a row and write them to the 8 distinct 16-byte slots of its 128-byte swizzled row
  // (chunk q to atom q / 8, slot (q % 8) ^ (xn % 8)): no bank conflict, one cache line a phase. Its weight
  // copies: chunks lane, lane + 32, lane + 64 of its warp's tile's unit.
  Item ii;
  bool iv = locate(blockIdx.x, n_items, ioff, p.E, tile_groups, ii);
  if (!iv) return;
  const int xn = 4 * warp + (lane >> 3);
  const uint32_t x_dst = static_cast<uint32_t>(xn * 128 + (((lane & 7) ^ (xn & 7)) * 16));
  constexpr int kUnitChunks = Dec::kUnitBytes / 16;
  const uint8_t* xrow = nullptr;
  auto item_row = [&]() {
    const int n0 = poff[ii.e] + ii.b * kNB, n_here = min(kNB, poff[ii.e + 1] - n0);
    xrow = xn < n_here ? static_cast<const uint8_t*>(kp.x) +
                             static_cast<long long>(__ldcg(pairs + n0 + xn) / p.x_div) * kp.K * 2
                       : nullptr;
  };
  item_row();
  const uint32_t stages_s = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  int is = 0;
  unsigned issued = 0;
  auto issue = [&]() {
    if (iv) {
      const uint32_t dst = stages_s + (issued % kBufs) * kStageBytes;
      const int tile = ii.r * kWarps + warp;
      if (tile < kp.R) {
        const uint8_t* src =
            kp.w + kp.expert_stride * ii.e + (static_cast<long long>(tile) * S + is) * Dec::kUnitBytes;
        for (int ch = lane; ch < kUnitChunks; ch += 32)
          cp_async16_s(dst + kXBytes + warp * Dec::kUnitBytes + 16 * ch, src + 16 * ch);
      }
      if (xrow != nullptr) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          cp_async16_s(dst + j * kAtomBytes + x_dst,
                       xrow + static_cast<long long>(is) * Dec::kUnitK * 2 + 16 * (8 * j + (lane & 7)));
        }
      }
      if (++is == S) {
        is = 0;
        iv = locate(ii.item + G, n_items, ioff, p.E, tile_groups, ii);
        if (iv) item_row();
      }
    }
    cp_async_commit();
    ++issued;
  };
  issue();

  Item ci;
  locate(blockIdx.x, n_items, ioff, p.E, tile_groups, ci);
  int cs = 0;
  float acc[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  uint32_t a[2][4][4];
  const int g = lane >> 2, t = lane & 3;
  for (unsigned u = 0;; ++u) {
    // One barrier per unit: after it every thread's copies of stage u are visible, and every warp's MMAs of
    // unit u - 2 are done (each warp waited for them in unit u - 1), so the issue may refill that buffer.
    cp_async_wait<0>();
    __syncthreads();
    issue();
    const int tile = ci.r * kWarps + warp;
    const unsigned stage = (u % kBufs) * kStageBytes;
    // Every warp runs the MMAs (warpgroup-collective); a warp past the last tile decodes a stale unit and
    // stores nothing.
    typename Dec::Frag f;
    Dec::load(f, stages + stage + kXBytes + warp * Dec::kUnitBytes, lane);
    wide_unit(f, stages_s + stage, acc, a, smem, lane);
    bool more = true;
    if (++cs == S) {  // the item's K-run is complete: this warp's tile of the item's pairs
      wg_wait<0>();
      if (tile < kp.R) {
        const int n0 = poff[ci.e] + ci.b * kNB, end = poff[ci.e + 1];
#pragma unroll
        for (int nt = 0; nt < kNB / 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = n0 + 8 * nt + 2 * t + (i & 1), row = tile * 16 + g + 8 * (i >> 1);
            if (n < end && row < kp.rows)
              static_cast<float*>(kp.y)[static_cast<long long>(__ldcg(pairs + n)) * p.ldy + row] =
                  acc[4 * nt + i];
          }
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
      cs = 0;
      more = locate(ci.item + G, n_items, ioff, p.E, tile_groups, ci);
    }
    if (!more) break;
  }
  wg_wait<0>();
  cp_async_wait<0>();
}

// xp = x with each 256-column unit's 128 words at unit_word_slot (one thread a destination word: the reads
// of a warp are four 32-byte runs).
__global__ void permute_units_kernel(const uint32_t* x, long long words, uint32_t* xp) {
  pdl_entry();
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= words) return;
  const int d = static_cast<int>(i & 127);
  xp[i] = __ldcg(x + (i - d) + unit_word_at(d));
}

}  // namespace

cudaError_t raw_grouped_wide(bool gate_up, const ExpertParams& p, cudaStream_t s, bool pdl) {
  const int smem = wide_smem_bytes(p.E);
  static int cache[2] = {-1, 0};
  int blocks = 0;
  if (const cudaError_t e = resident_grid(grouped_wide_kernel, kThr, smem, p.E, cache, blocks);
      e != cudaSuccess)
    return e;
  const int tile_groups = (p.kp.R + kWarps - 1) / kWarps;
  return launch_pdl(pdl, grouped_wide_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThr),
                    static_cast<size_t>(smem), s, p, tile_groups, gate_up ? 1 : 0);
}

cudaError_t raw_permute_units(const uint16_t* x, int rows, int cols, uint16_t* xp, cudaStream_t s, bool pdl) {
  if (cols % Dec::kUnitK || rows < 0 || x == nullptr || xp == nullptr) return cudaErrorInvalidValue;
  const long long words = static_cast<long long>(rows) * cols / 2;
  if (words == 0) return cudaSuccess;
  constexpr int kT = 256;
  return launch_pdl(pdl, permute_units_kernel, dim3(static_cast<unsigned>((words + kT - 1) / kT)), dim3(kT),
                    0, s, reinterpret_cast<const uint32_t*>(x), words, reinterpret_cast<uint32_t*>(xp));
}

}  // namespace gridq::cuda::detail

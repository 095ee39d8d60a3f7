// Routed experts for prefill-sized steps: the grouped experts (moe_grouped.cu) with an item of 16 tiles ×
// 64 of the expert's pairs on one CTA, so a weight unit is decoded once per 64 pairs instead of once per 8.
//
// The same bits as moe_grouped.cu, pair for pair: each 16-row tile of a pair is one warp's mma chain over
// the whole K, from +0, units in order, the unit's 16 sub-vector products in the GEMV's order (gemm_unit),
// one chain per token column. mma columns are independent, so a column's value does not depend on the other
// pairs of its block (nor on the garbage of a block's unused columns, which are never stored). Which kernel
// runs is therefore free: grouped_moe picks it by the step's pairs per expert.
//
// CTA = 16 warps = 16 consecutive tiles (tile group) × 64 pairs. Per K-unit a cp.async stage holds the 16
// tiles' weight units and the 64 pairs' activation slices (gathered by pair: x row = pair / x_div); the
// stages run ahead across the CTA's items (item i, i + grid, …), one in flight beside the computed one.
#include "runtime/cuda/gemm_impl.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/moe_items.cuh"

namespace gridq::cuda::detail {

namespace {

using Dec = DecCB<16, 2>;
constexpr int kNT = 8, kNB = 8 * kNT;  // token tiles and pairs of an item
// 16 warps (tiles) a CTA and 2 stages: the decoder tables (65 KB) allow one CTA an SM, and the decode's
// dependent integer chains need more than 2 warps a scheduler to hide their latency (ncu: with 8 warps and
// 3 stages, 72 % of cycles had no eligible warp, mostly fixed-latency dependencies).
constexpr int kWarps = kWideTiles, kThr = kWarps * 32, kStages = 2;
using X = XSlice<Dec>;
constexpr int kWBytes = kWarps * Dec::kUnitBytes;
constexpr int kStageBytes = kWBytes + kNB * X::kPitch;

constexpr int wide_smem_bytes(int E) {
  return Dec::kSmemBytes + 2 * (E + 1) * 4 + 16 + kStages * kStageBytes;
}

// y[pair, row] FP32 (gate_up: the [2I, H] stacks' rows, gate then up; down: H) for every item of the launch.
__global__ void __launch_bounds__(kThr, 1)
    grouped_wide_kernel(const ExpertParams p, int tile_groups, int gate_up) {
  extern __shared__ __align__(16) unsigned char smem[];
  const KParams& kp = p.kp;
  Dec::init_smem(smem, kp);
  int *ioff, *poff;  // [E + 1] item offsets, [E + 1] pair offsets
  uint8_t* stages = stage_offsets(p.grp, p.E, gate_up != 0, smem + Dec::kSmemBytes, ioff, poff);
  const int* pairs = p.grp + grp_pairs_off(p.E);
  const int n_items = ioff[p.E], S = kp.S, G = static_cast<int>(gridDim.x);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  // Issue side: (item, unit) in order over the CTA's items, kGemmStages - 1 ahead of the compute side.
  Item ii;
  bool iv = locate(blockIdx.x, n_items, ioff, p.E, tile_groups, ii);
  if (!iv) return;
  // A thread copies 16-byte chunk `lane` of every activation row n = warp + 16·j of the item's pairs, and
  // chunks lane, lane + 32, lane + 64 of its warp's tile's weight unit: no divisions in the issue loop, and
  // the pairs' activation rows are looked up once per item (xrow), not once per unit.
  constexpr int kRowChunks = X::kXB / 16, kQ = X::kXB / 4, kRowsPerThread = kNB / kWarps;
  static_assert(kRowChunks == 32 && kNB % kWarps == 0, "one 16-byte chunk of each row per lane");
  constexpr int kUnitChunks = Dec::kUnitBytes / 16;
  const uint8_t* xrow[kRowsPerThread];
  auto item_rows = [&]() {
    const int n0 = poff[ii.e] + ii.b * kNB, n_here = min(kNB, poff[ii.e + 1] - n0);
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int n = warp + kWarps * j;
      xrow[j] = n < n_here
                    ? static_cast<const uint8_t*>(kp.x) +
                          static_cast<long long>(__ldcg(pairs + n0 + n) / p.x_div) * kp.K * 2 + 16 * lane
                    : nullptr;
    }
  };
  item_rows();
  int is = 0;
  unsigned issued = 0;
  auto issue = [&]() {
    if (iv) {
      uint8_t* dst = stages + (issued % kStages) * kStageBytes;
      const int tile = ii.r * kWarps + warp;
      if (tile < kp.R) {
        const uint8_t* src =
            kp.w + kp.expert_stride * ii.e + (static_cast<long long>(tile) * S + is) * Dec::kUnitBytes;
        for (int ch = lane; ch < kUnitChunks; ch += 32)
          cp_async16(dst + warp * Dec::kUnitBytes + 16 * ch, src + 16 * ch);
      }
      const int b = 16 * lane;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j)
        if (xrow[j] != nullptr)
          cp_async16(dst + kWBytes + (warp + kWarps * j) * X::kPitch + (b / kQ) * X::kTStride + b % kQ,
                     xrow[j] + static_cast<long long>(is) * X::kXB);
      if (++is == S) {
        is = 0;
        iv = locate(ii.item + G, n_items, ioff, p.E, tile_groups, ii);
        if (iv) item_rows();
      }
    }
    cp_async_commit();
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue();

  Item ci;
  locate(blockIdx.x, n_items, ioff, p.E, tile_groups, ci);
  int cs = 0;
  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  const int g = lane >> 2, t = lane & 3;
  for (unsigned u = 0;; ++u) {
    // One barrier per unit: after it every thread's copies of stage u are visible and every warp is done
    // with stage u - 1, whose buffer then takes the next unit while this one is computed.
    cp_async_wait<kStages - 2>();
    __syncthreads();
    issue();
    const int tile = ci.r * kWarps + warp;
    const uint8_t* st = stages + (u % kStages) * kStageBytes;
    if (tile < kp.R) {
      typename Dec::Frag f;
      Dec::load(f, st + warp * Dec::kUnitBytes, lane);
      // Token tiles with pairs only (an expert's last block is partial; a column's bits do not change).
      const int live = (min(kNB, poff[ci.e + 1] - poff[ci.e] - ci.b * kNB) + 7) / 8;
      gemm_unit<Dec, kNT>(f, st + kWBytes, acc, smem, lane, live);
    }
    bool more = true;
    if (++cs == S) {  // the item's K-run is complete: this warp's tile of the item's pairs
      if (tile < kp.R) {
        const int n0 = poff[ci.e] + ci.b * kNB, end = poff[ci.e + 1];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int n = n0 + 8 * nt + 2 * t + (i & 1), row = tile * 16 + g + 8 * (i >> 1);
            if (n < end && row < kp.rows)
              static_cast<float*>(kp.y)[static_cast<long long>(__ldcg(pairs + n)) * p.ldy + row] = acc[nt][i];
            acc[nt][i] = 0.0f;
          }
      }
      cs = 0;
      more = locate(ci.item + G, n_items, ioff, p.E, tile_groups, ci);
    }
    if (!more) break;
  }
  cp_async_wait<0>();
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

}  // namespace gridq::cuda::detail

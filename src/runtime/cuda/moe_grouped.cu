// Routed experts grouped by expert, for any number of rows: a decode step of one token and a prefill chunk
// of 64 run the same kernels (kernels.h: grouped_moe).
//
// Batch invariance by construction: every 16-row tile of a (token, expert) pair's gate/up and down outputs is
// computed by ONE warp over the whole K of the tile, units in order, one mma chain per token column. A
// column's bits depend on its own activations and the expert's weights only, never on the other columns of
// the block, on how many pairs the expert has, or on the step's size. SwiGLU + FP4 QDQ then run per pair
// (the GEMV epilogue's arithmetic, swiglu_column: in the gate_up item's epilogue here, in swiglu_pairs_kernel
// (swiglu_pairs.cu) after the wide kernel), and the per-token combine (raw_moe_combine) sums a token's pairs
// in ascending expert order, as the CPU reference does.
//
// Work: group_pairs_kernel (moe_group_pairs.cu) sorts the step's T·k pairs by expert (stable: ascending pair
// index) and counts the items; an item is (expert, 16-row tile, block of NB = 8·NT of the expert's pairs).
// From 16 tokens a step an item takes two tiles (kPair): a gate_up item is a gate tile and its up tile (rows
// r and I + r of the [2I, H] stack) and ends with the SwiGLU + FP4 QDQ epilogue (swiglu_column), so h is
// written without an FP32 round trip or a kernel of its own; a down item is two adjacent tiles. The warp
// streams the two units of each K-slice together and runs the two mma chains on one load of the pairs'
// activations. Below 16 tokens an item is one tile (twice the busy warps at batch 1-4), gate_up writes gu
// FP32 and swiglu_pairs_kernel makes h: the same bits either way. Item i goes to the warp of rank i mod W,
// ranks striped across blocks (rank = warp-in-block · blocks + block) so that a small step spreads over every
// SM. A warp streams the weight units of its items through a cp.async ring that runs ahead across item
// boundaries. 16 warps per block share one copy of the decoder tables.
#include "runtime/cuda/kernels/pdl_launch.cuh"
#include "runtime/cuda/kparams.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/moe_items.cuh"

namespace gridq::cuda::detail {

namespace {

using Dec = DecCB<16, 2>;  // the fused routed experts' format (device_model.cpp)

// The token columns of an item: per 8-column tile nt, the activation row this lane loads (column 8nt + g)
// and the pairs of the two output columns it writes (8nt + 2t + c); -1 where the block runs past the
// expert's pairs.
template <int NT>
struct Cols {
  const uint16_t* xr[NT];
  int po[NT][2];
};
template <int NT>
__device__ __forceinline__ void item_cols(const ExpertParams& p, const Item& it, const int* poff, int lane,
                                          Cols<NT>& c) {
  const int* pairs = p.grp + grp_pairs_off(p.E);
  const int n0 = poff[it.e] + it.b * 8 * NT, end = poff[it.e + 1];
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int nl = n0 + 8 * nt + g;
    c.xr[nt] = nullptr;
    if (nl < end) {
      const int pr = __ldcg(pairs + nl);
      c.xr[nt] = static_cast<const uint16_t*>(p.kp.x) + static_cast<long long>(pr / p.x_div) * p.kp.K;
    }
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const int no = n0 + 8 * nt + 2 * t + cc;
      c.po[nt][cc] = no < end ? __ldcg(pairs + no) : -1;
    }
  }
}

inline constexpr int kExpertWarps = 16, kExpertThreads = kExpertWarps * 32, kExpertStages = 4;

// A ring slot holds one unit at the 16-byte phase its global copy has in a 128-byte line (slots 128-aligned
// and padded to whole lines), and the fill's lanes are rotated by that phase: each 8-lane phase of a
// cp.async then reads one 128-byte line of global memory into one line of shared memory. (Units are 1168
// bytes, so each starts 16 bytes further into a line than the one before; filled from lane 0 at the unit's
// first byte, a fill instruction cost 9.1 L1 wavefronts for 3.3 ideal: ncu, H200, batch 64, 18 M of the
// gate_up launch's 119 M, a launch bound by L1 throughput at 87 %.) Where the padded rings do not fit beside
// the offset tables (paired items, E > 359) the slots are unit-sized and the fill unrotated.
inline constexpr int kLine = 128, kPadSlot = (Dec::kUnitBytes + kLine - 1) / kLine * kLine;
// Shared memory before the offset tables: the codebook tables and the 16 words of the v2 scale table.
inline constexpr int kTablesBytes = Dec::kScaleTabOff + 16 * 4;
inline constexpr int kMaxSmem = 227 * 1024;
__host__ __device__ constexpr int grouped_smem_bytes_at(int E, bool pair, int slot) {
  return kTablesBytes + 2 * (E + 1) * 4 + 16 + kLine + kExpertWarps * kExpertStages * (pair ? 2 : 1) * slot;
}
constexpr bool ring_padded(int E, bool pair) { return grouped_smem_bytes_at(E, pair, kPadSlot) <= kMaxSmem; }
static_assert(Dec::kUnitBytes % 16 == 0 && ring_padded(256, true));

// Items of two tiles (kPair, steps of 16 tokens and more), a stage holding both tiles' units of a K-slice:
// kPairGateUp, a gate tile and its up tile (rows r and I + r of the [2I, H] stacks), writes h[pair, i] BF16
// (SwiGLU, then the FP4 QDQ when p.qdq_fp4); kPairDown, two adjacent tiles of the [H, I] stacks, writes their
// rows of y FP32, the pairs' activation loads shared by both. kPairNone: one tile an item, y[pair, row] FP32
// (gate_up: gu, the [2I, H] stacks' rows, gate then up; down: the [H, I] stacks' rows).
inline constexpr int kPairNone = 0, kPairGateUp = 1, kPairDown = 2;
// kDefaultTable: the matrices' v2 scale table is the default (the scales by arithmetic,
// DecCB::scale2_default).
template <int NT, bool kGateUp, int kPair, bool kPad, bool kDefaultTable>
__global__ void __launch_bounds__(kExpertThreads, 1) grouped_expert_kernel(const ExpertParams p) {
  static_assert(kPair == kPairNone || (kPair == kPairGateUp) == kGateUp, "gate_up pairs gate and up tiles");
  constexpr bool kFused = kPair == kPairGateUp;
  constexpr int kStages = kExpertStages;
  constexpr int kChunks = Dec::kUnitBytes / 16;
  constexpr int NP = kPair != kPairNone ? 2 : 1;  // units a stage
  extern __shared__ __align__(16) unsigned char smem[];
  const KParams& kp = p.kp;
  Dec::init_smem(smem, kp);
  int *ioff, *poff;  // [E + 1] item offsets, [E + 1] pair offsets
  uint8_t* rings = stage_offsets(p.grp, p.E, kGateUp, smem + kTablesBytes, ioff, poff);
  rings += (kLine - static_cast<int>(__cvta_generic_to_shared(rings) % kLine)) % kLine;
  // (A compile-time slot: a runtime one cost the table lookups their uniform base register, SASS.)
  constexpr int slot = kPad ? kPadSlot : Dec::kUnitBytes;
  // The 16-byte phase of unit u in its 128-byte line, where the slots are padded (0 where not).
  auto phase = [&](const uint8_t* u) {
    return kPad ? static_cast<int>(reinterpret_cast<uintptr_t>(u) >> 4) & 7 : 0;
  };

  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int W = static_cast<int>(gridDim.x) * kExpertWarps;
  const int rank = (static_cast<int>(threadIdx.x) >> 5) * static_cast<int>(gridDim.x) + blockIdx.x;
  // Item tiles: paired items number R/2 (gate_up: the I/16 gate tiles, each with its up tile R/2 tiles later;
  // down: tiles 2r and 2r + 1).
  const int n_items = ioff[p.E], R = NP == 2 ? kp.R / 2 : kp.R, S = kp.S;
  const long long up_off =  // an item's first tile -> its second
      static_cast<long long>(kPair == kPairGateUp ? R : 1) * S * Dec::kUnitBytes;
  uint8_t* ring = rings + (threadIdx.x >> 5) * kStages * NP * slot;
  auto unit0 = [&](const Item& it) {
    return kp.w + kp.expert_stride * it.e +
           static_cast<long long>(kPair == kPairDown ? 2 * it.r : it.r) * S * Dec::kUnitBytes;
  };

  // Issue side: the weight units of this warp's items in order, kStages - 1 stages ahead of the compute side.
  Item ii;
  bool iv = locate(rank, n_items, ioff, p.E, R, ii);
  if (!iv) return;
  int is = 0;
  const uint8_t* iw = unit0(ii);
  unsigned issued = 0;
  auto issue = [&]() {
    if (iv) {
      const int m0 = phase(iw), m1 = NP == 2 ? phase(iw + up_off) : 0;
      uint8_t* d0 = ring + (issued % kStages) * NP * slot + 16 * m0;
      uint8_t* d1 = d0 - 16 * m0 + slot + 16 * m1;
#pragma unroll
      for (int j = 0; j < (kChunks + 7 + 31) / 32; ++j) {  // unrolled: no loop counter per chunk
        const int c0 = lane + 32 * j - m0;
        if (c0 >= 0 && c0 < kChunks) cp_async16(d0 + 16 * c0, iw + 16 * c0);
        if constexpr (NP == 2) {
          const int c1 = lane + 32 * j - m1;
          if (c1 >= 0 && c1 < kChunks) cp_async16(d1 + 16 * c1, iw + up_off + 16 * c1);
        }
      }
      iw += Dec::kUnitBytes;
      if (++is == S) {
        is = 0;
        iv = locate(ii.item + W, n_items, ioff, p.E, R, ii);
        if (iv) iw = unit0(ii);
      }
    }
    cp_async_commit();
    ++issued;
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue();

  float acc[NP][NT][4];
  auto zero_acc = [&]() {
#pragma unroll
    for (int q = 0; q < NP; ++q)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[q][nt][i] = 0.0f;
  };
  zero_acc();
  Item ci;
  locate(rank, n_items, ioff, p.E, R, ci);
  int cs = 0;
  // The phases of the compute side's units: its item's first unit's, then one unit (kUnitBytes / 16 chunks)
  // further a slice; the second tile's is up_off / 16 chunks further.
  int cp0 = phase(unit0(ci));
  const int up_ph = static_cast<int>((up_off >> 4) & 7);
  constexpr int kUnitPh = (Dec::kUnitBytes / 16) & 7;
  Cols<NT> cc, nc;
  item_cols<NT>(p, ci, poff, lane, cc);
  // One activation buffer, refilled group by group: after a unit's products of group G (sub-vectors 4G…4G+3,
  // fragment words v[2G], v[2G + 1]) the next slice's words of that group are loaded into the registers just
  // read, three quarters of a unit ahead of their use. (Two whole buffers in turn held 64 of the kernel's 128
  // registers: ncu at batch 64 had the table lookups' latency, short scoreboard, as the top stall.) Columns
  // past an item's pairs keep whatever an earlier load left there (zero at first): their mma columns are
  // never stored, and a column's bits depend on its own activations only.
  typename Dec::XFrag x[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 8; ++i) x[nt].v[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    if (cc.xr[nt]) Dec::load_x(x[nt], cc.xr[nt], t, true);
  const uint2* tab = reinterpret_cast<const uint2*>(smem);
  const int* stab = reinterpret_cast<const int*>(smem + Dec::kScaleTabOff);
  const int rep = lane % Dec::kRep;
  typename Dec::Frag cur, cur2;  // cur2: the second tile's unit (NP == 2)
  unsigned u = 0;
  // The item's K-run is complete: its rows of its pairs (gate_up: h through the SwiGLU epilogue).
  auto store = [&]() {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if constexpr (kFused) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          uint16_t hv[2];  // rows g and g + 8 of column 8nt + 2t + c (warp-collective: every lane calls it)
          swiglu_column(acc[0][nt][c], acc[0][nt][2 + c], acc[1][nt][c], acc[1][nt][2 + c], p.qdq_fp4 != 0,
                        hv);
          const int pr = cc.po[nt][c];
          if (pr >= 0) {
            uint16_t* h = static_cast<uint16_t*>(kp.y) + static_cast<long long>(pr) * p.ldy + ci.r * 16 + g;
            h[0] = hv[0];
            h[8] = hv[1];
          }
        }
      } else {
#pragma unroll
        for (int q = 0; q < NP; ++q)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int pr = cc.po[nt][i & 1], row = (NP * ci.r + q) * 16 + g + 8 * (i >> 1);
            if (pr >= 0 && row < kp.rows)
              static_cast<float*>(kp.y)[static_cast<long long>(pr) * p.ldy + row] = acc[q][nt][i];
          }
      }
    }
    zero_acc();
  };
  // One K-slice: its products with x while x takes the next slice's activations; false after the warp's last.
  auto step = [&]() -> bool {
    __syncwarp();  // every lane has read the stage that the next issue overwrites
    issue();
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint8_t* stage = ring + (u % kStages) * NP * slot;
    const int ph = kPad ? (cp0 + kUnitPh * cs) & 7 : 0;
    Dec::load(cur, stage + 16 * ph, lane);
    if constexpr (NP == 2) Dec::load(cur2, stage + slot + 16 * (kPad ? (ph + up_ph) & 7 : 0), lane);
    // The next slice: the same item's next K-slice, or the first slice of the warp's next item.
    Item ni = ci;
    int ns = cs + 1;
    bool nv = true;
    if (ns == S) {
      ns = 0;
      nv = locate(ci.item + W, n_items, ioff, p.E, R, ni);
      if (nv) item_cols<NT>(p, ni, poff, lane, nc), cp0 = phase(unit0(ni));
    } else {
      nc = cc;
    }
    // Group G of both tiles (each tile's chain keeps its order), then the next slice's words of group G.
#define GRIDQ_MOE_GROUP(G)                                                                                 \
  {                                                                                                        \
    Dec::template mma_group<G, NT, kDefaultTable>(cur, x, acc[0], tab, stab, rep);                         \
    if constexpr (NP == 2) Dec::template mma_group<G, NT, kDefaultTable>(cur2, x, acc[1], tab, stab, rep); \
    if (nv) {                                                                                              \
      _Pragma("unroll") for (int nt = 0; nt < NT; ++nt) if (nc.xr[nt]) {                                   \
        const uint16_t* xr = nc.xr[nt] + ns * Dec::kUnitK + 64 * t + 16 * G;                               \
        x[nt].v[2 * G] = ldx16<false>(xr);                                                                 \
        x[nt].v[2 * G + 1] = ldx16<false>(xr + 8);                                                         \
      }                                                                                                    \
    }                                                                                                      \
  }
    GRIDQ_MOE_GROUP(0);
    GRIDQ_MOE_GROUP(1);
    GRIDQ_MOE_GROUP(2);
    GRIDQ_MOE_GROUP(3);
#undef GRIDQ_MOE_GROUP
    if (cs == S - 1) store();
    ci = ni, cs = ns, cc = nc, ++u;
    return nv;
  };
  while (step()) {
  }
  cp_async_wait<0>();
}

// Whether the v2 scale table in kp is the default one (stab[c] = T_bf16[c] − 127·128 = 16·c).
bool default_v2_table(const KParams& kp) {
  for (int c = 0; c < 16; ++c)
    if (kp.stab[c] != 16 * c) return false;
  return true;
}

template <int NT, bool kGateUp, int kPair, bool kPad>
auto grouped_kernel(bool default_table) {
  return default_table ? grouped_expert_kernel<NT, kGateUp, kPair, kPad, true>
                       : grouped_expert_kernel<NT, kGateUp, kPair, kPad, false>;
}

template <int NT, bool kGateUp, int kPair>
cudaError_t launch_grouped(const ExpertParams& p, cudaStream_t s, bool pdl) {
  const bool pad = ring_padded(p.E, kPair != kPairNone), dflt = default_v2_table(p.kp);
  auto kern =
      pad ? grouped_kernel<NT, kGateUp, kPair, true>(dflt) : grouped_kernel<NT, kGateUp, kPair, false>(dflt);
  const int smem = grouped_smem_bytes_at(p.E, kPair != kPairNone, pad ? kPadSlot : Dec::kUnitBytes);
  // Occupancy depends on E (the offset tables, the ring's slots) and the kernel: queried per (E, table
  // kind), cached for the last one seen.
  static int cache[2] = {-1, 0};
  int blocks = 0;
  if (const cudaError_t e = resident_grid(kern, kExpertThreads, smem, 2 * p.E + dflt, cache, blocks);
      e != cudaSuccess)
    return e;
  return launch_pdl(pdl, kern, dim3(static_cast<unsigned>(blocks)), dim3(kExpertThreads),
                    static_cast<size_t>(smem), s, p);
}

}  // namespace

cudaError_t raw_grouped_experts(bool gate_up, int nt, const ExpertParams& p, cudaStream_t s, bool pdl) {
  // One token tile per item: a 16-warp block leaves 128 registers a thread, which two tiles' activation
  // fragments (loaded one unit ahead) would overflow.
  if (nt != 1) return cudaErrorNotSupported;
  if (p.pair && p.kp.R % 2) return cudaErrorInvalidValue;
  if (!gate_up)
    return p.pair ? launch_grouped<1, false, kPairDown>(p, s, pdl)
                  : launch_grouped<1, false, kPairNone>(p, s, pdl);
  return p.pair ? launch_grouped<1, true, kPairGateUp>(p, s, pdl)
                : launch_grouped<1, true, kPairNone>(p, s, pdl);
}

}  // namespace gridq::cuda::detail

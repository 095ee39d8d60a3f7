// Attention splits on tensor cores, prefill and decode alike (head_dim 32, 64, 128). An item is (tile, KV
// head, split): a tile is up to 16·W (query row, head) pairs of one run of consecutive positions of one
// sequence sharing the KV head; a split is kAttnSplitKeys key positions, cut at fixed positions. The CTA
// streams the split's keys in 64-key blocks through shared memory (K, V BF16, double-buffered cp.async);
// each warp runs the FlashAttention-2 loop for its 16 pairs: S = Q·Kᵀ on BF16 mma.sync (q rounded to BF16),
// online softmax in the log2 domain (FP32), O += P·V with P in BF16. It writes each pair's (max, sum,
// unnormalised O) for the merge (attention.cu, split order), or, fused (prefill), walks a tile's splits and
// folds them (attn_fold.cuh). Batch invariance by construction: an mma row does not depend on the other
// rows of its tile, key blocks sit at fixed positions (a block outside a row's window is an exact no-op for
// it: p = 0, rescale by exactly 1, or 0 before its first key), and every cross-lane reduction is one tree for
// every row: a pair's partial is the same alone (decode) or in a 64-pair tile (prefill), and one compiled
// kernel serves every W (the warps per CTA are blockDim, not a template).
#include <cfloat>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/kernels/attention_tc.h"
#include "runtime/cuda/kernels/attn_fold.cuh"
#include "runtime/cuda/kernels/attn_tiles.cuh"
#include "runtime/cuda/kernels/kv_view.cuh"
#include "runtime/cuda/kernels/pdl_launch.cuh"

namespace gridq::cuda::detail {
namespace {

constexpr int kKeys = 64;  // keys per shared-memory block
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int pitch() {
  return D + 8;  // BF16 elements per shared row: 16 bytes of padding keep ldmatrix conflict-free
}
// Key blocks in flight: a 3-slot ring keeps two blocks' copies in flight while one is computed (a decode CTA
// with one slot ahead waited out a whole DRAM round trip on most blocks: 45-61 % of DRAM bandwidth at batch
// 64 / 1k). Three slots of a D = 128 block and a decode step's tile table still fit two CTAs an SM.
constexpr int kSlots = 3;
template <int D>
constexpr int kv_smem_bytes() {
  return kSlots * 2 * kKeys * pitch<D>() * 2;  // {K, V} × kSlots
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(hi)) << 16);
}

// Loads keys [b0, b0 + 64) of KV head kvh into buffers (ks, vs); keys outside [jmin, jmax] are zeros, so
// P·V never meets bytes no row may see. The block's 64 row addresses are formed once per warp (lane l: keys l
// and l + 32, one page lookup each, K and V on the same page) and passed round by shuffles: the copy loop
// itself is two shuffles and two 16-byte copies a chunk, where forming each chunk's address (two page-table
// reads and two divisions by the page size) cost a one-warp CTA most of a key block's time at long context.
template <int D>
__device__ __forceinline__ void load_block(const AttnArgs& a, int slot, int kvh, int b0, int jmin, int jmax,
                                           uint16_t* ks, uint16_t* vs) {
  constexpr int kChunks = D / 8;              // 16-byte chunks per key row
  constexpr int kRowsPerWarp = 32 / kChunks;  // key rows one warp copies per pass
  static_assert(kKeys == 64 && kChunks <= 32 && 32 % kChunks == 0, "two key rows a lane, whole rows a warp");
  const int lane = threadIdx.x % 32;
  long long off[2];  // element offset of key b0 + lane + 32·h's K row (its V row: + v_off − k_off), −1: zeros
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = b0 + lane + 32 * h;
    off[h] = j >= jmin && j <= jmax
                 ? (kv_row(a.kv, slot, j, false) - a.kv.base) + static_cast<long long>(kvh) * D
                 : -1;
  }
  const long long dv = a.kv.v_off - a.kv.k_off;
  const int c = lane % kChunks, warps = static_cast<int>(blockDim.x) / 32;
  for (int r = threadIdx.x / 32 * kRowsPerWarp + lane / kChunks; r < kKeys; r += warps * kRowsPerWarp) {
    // Every lane of the warp runs the same passes (r − lane/kChunks is uniform), so the shuffle is full; the
    // warp's rows of a pass lie in one half of the block (kRowsPerWarp divides 32), so all lanes offer the
    // same half.
    const long long o = __shfl_sync(0xffffffffu, r < 32 ? off[0] : off[1], r % 32);
    uint16_t* kd = ks + r * pitch<D>() + 8 * c;
    uint16_t* vd = vs + r * pitch<D>() + 8 * c;
    if (o >= 0) {
      cp_async16(kd, a.kv.base + o + 8 * c);
      cp_async16(vd, a.kv.base + o + dv + 8 * c);
    } else {
      *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
    }
  }
}

// kFused: an item is (tile, KV head) over all the tile's splits, each split's softmax started afresh at its
// first block as a split item starts it and folded into the row's (M, L, O) (attn_fold.cuh) at its last; o is
// written normalised, no partials, no merge (8k prompt: attention 302 -> 136 ms, H100, session 34). Else an
// item is one split and writes its partial for the merge. The same bits either way.
template <int D, bool kFused>
__global__ void __launch_bounds__(256) attn_tc_kernel(const AttnArgs a) {
  pdl_entry();
  extern __shared__ __align__(16) uint16_t smem[];
  Tile* tiles = reinterpret_cast<Tile*>(reinterpret_cast<unsigned char*>(smem) + kv_smem_bytes<D>());
  __shared__ int total_items, n_tiles;
  __shared__ unsigned starts[kAttnFusedSliceRows / 32];
  const int g = a.nh / a.nkv, warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  build_tiles(a, g, 16 * warps, kFused, tiles, &n_tiles, &total_items, starts);
  // Slot i: K at smem + 2i·64·pitch, V right after it.
  auto kslot = [&](int i) { return smem + 2 * i * kKeys * pitch<D>(); };
  const float scale = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(D))), kLog2e);
  for (int it = blockIdx.x; it < total_items; it += gridDim.x) {
    // Fused items from the last: a slice's later tiles hold its longest rows, so the longest go first.
    const int item = kFused ? total_items - 1 - it : it;
    int ti = 0;  // the tile holding the item: binary search on `first`
    for (int lo = 0, hi = n_tiles - 1; lo <= hi;) {
      const int mid = (lo + hi) / 2;
      if (tiles[mid].first <= item)
        ti = mid, lo = mid + 1;
      else
        hi = mid - 1;
    }
    const Tile tl = tiles[ti];
    const int r_item = item - tl.first, kvh = kFused ? r_item : r_item % a.nkv;
    const int s_first = kFused ? tl.lo : tl.lo + r_item / a.nkv,
              s_last = kFused ? tl.lo + tl.ns - 1 : s_first;
    const int slot = a.rows.seq_slot[tl.t0];
    // The keys any row of the tile may see in the item's splits, and the 64-key blocks holding them (a block
    // lies in one split: kAttnSplitKeys is a multiple of kKeys).
    const int jmin = max(attn_first_key(a.window, a.rows.pos[tl.t0 + tl.p0 / g]), s_first * kAttnSplitKeys);
    const int jmax = min(a.rows.pos[tl.t0 + (tl.p0 + tl.np - 1) / g], (s_last + 1) * kAttnSplitKeys - 1);
    const int blk0 = jmin / kKeys * kKeys, n_blk = jmax / kKeys - jmin / kKeys + 1;
    // A warp with no pair of the tile (a decode row's g pairs fill part of warp 0 only) helps with the copies
    // and the barriers but computes nothing: its rows are never written, so skipping them keeps every bit and
    // frees the issue slots that 3 of a decode CTA's 4 warps spent on them.
    const bool warp_live = 16 * warp < tl.np;
    // This lane's two rows of the warp's 16: r = lane/4 and lane/4 + 8; their keys [first, pos].
    int row_t[2], row_h[2], row_first[2], row_pos[2], row_lo[2], row_hi[2];
    bool live[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int p = tl.p0 + 16 * warp + lane / 4 + 8 * i;
      live[i] = 16 * warp + lane / 4 + 8 * i < tl.np;
      const int t = tl.t0 + (live[i] ? p / g : 0);
      row_t[i] = t, row_h[i] = kvh * g + p % g;
      row_pos[i] = a.rows.pos[t];
      row_first[i] = attn_first_key(a.window, row_pos[i]);
    }
    // Q fragments (A of m16n8k16, row-major 16 × D): q FP32 rounded to BF16.
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const float* q = a.q + (static_cast<long long>(row_t[i]) * a.nh + row_h[i]) * D + 16 * kk + 8 * hi +
                           2 * (lane % 4);
          const float2 v = live[i] ? *reinterpret_cast<const float2*>(q) : make_float2(0.0f, 0.0f);
          qf[kk][i + 2 * hi] = pack2(v.x, v.y);
        }
    float acc[D / 8][4];
    float m[2], l[2];
    // The fused item's running fold per row (unused by split items).
    float fo[kFused ? D / 8 : 1][4], fm[2] = {-INFINITY, -INFINITY}, fl[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < (kFused ? D / 8 : 1); ++nt) fo[nt][0] = fo[nt][1] = fo[nt][2] = fo[nt][3] = 0.0f;
    __syncthreads();  // the previous item's readers are done with the buffers
    for (int b = 0; b < kSlots - 1; ++b) {  // one commit group a block, empty past the item's blocks
      if (b < n_blk)
        load_block<D>(a, slot, kvh, blk0 + kKeys * b, jmin, jmax, kslot(b), kslot(b) + kKeys * pitch<D>());
      cp_async_commit();
    }
    for (int b = 0; b < n_blk; ++b) {
      const int kb0 = blk0 + kKeys * b;
      if (b == 0 || kb0 % kAttnSplitKeys == 0) {  // a split's first block: a fresh softmax, its keys per row
        const int split = kb0 / kAttnSplitKeys;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          m[i] = -INFINITY, l[i] = 0.0f;
          row_lo[i] = live[i] ? max(row_first[i], split * kAttnSplitKeys) : 1;
          row_hi[i] = live[i] ? min(row_pos[i], (split + 1) * kAttnSplitKeys - 1) : 0;
        }
      }
      // One barrier per block: after it every thread's copies of block b are visible (only the newest group,
      // block b + 1, may be pending) and every warp is done with block b - 1, whose slot then takes block b
      // + 2.
      cp_async_wait<kSlots - 2>();
      __syncthreads();
      if (b + kSlots - 1 < n_blk) {
        uint16_t* ns = kslot((b + kSlots - 1) % kSlots);
        load_block<D>(a, slot, kvh, blk0 + kKeys * (b + kSlots - 1), jmin, jmax, ns, ns + kKeys * pitch<D>());
      }
      cp_async_commit();
      if (!warp_live) continue;
      const uint16_t* ks = kslot(b % kSlots);
      const uint16_t* vs = ks + kKeys * pitch<D>();
      // S = Q·Kᵀ: 8 tiles of 8 keys; ldmatrix.x4 gives two key tiles × 16 dims.
      float s[kKeys / 8][4];
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t kb[4];
          const int mtx = lane / 8;
          ldsm_x4(kb, ks + (16 * np + (mtx / 2) * 8 + lane % 8) * pitch<D>() + 16 * kk + (mtx % 2) * 8);
          mma_bf16(s[2 * np], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], kb[0], kb[1]);
          mma_bf16(s[2 * np + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], kb[2], kb[3]);
        }
      // Online softmax, per row: scale, mask, block max, rescale.
      float corr[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = kb0 + 8 * nt + 2 * (lane % 4) + e;
            float& v = s[nt][2 * i + e];
            v = (j >= row_lo[i] && j <= row_hi[i]) ? __fmul_rn(v, scale) : -INFINITY;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m[i], mx);
        const float mu = mn == -INFINITY ? 0.0f : mn;  // no key yet: keep everything exactly zero
        corr[i] = exp2f(__fsub_rn(m[i], mu));
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = s[nt][2 * i + e];
            v = exp2f(__fsub_rn(v, mu));
            sum = __fadd_rn(sum, v);
          }
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
        l[i] = __fadd_rn(__fmul_rn(l[i], corr[i]), sum);
        m[i] = mn;
      }
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        acc[nt][0] = __fmul_rn(acc[nt][0], corr[0]), acc[nt][1] = __fmul_rn(acc[nt][1], corr[0]);
        acc[nt][2] = __fmul_rn(acc[nt][2], corr[1]), acc[nt][3] = __fmul_rn(acc[nt][3], corr[1]);
      }
      // O += P·V: P's C fragments are the A fragments of the next mma (16 keys per k-step).
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t p0 = pack2(s[2 * kk][0], s[2 * kk][1]), p1 = pack2(s[2 * kk][2], s[2 * kk][3]);
        const uint32_t p2 = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        const uint32_t p3 = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vb[4];
          const int mtx = lane / 8;
          ldsm_x4_t(vb, vs + (16 * kk + (mtx % 2) * 8 + lane % 8) * pitch<D>() + 16 * dp + (mtx / 2) * 8);
          mma_bf16(acc[2 * dp], p0, p1, p2, p3, vb[0], vb[1]);
          mma_bf16(acc[2 * dp + 1], p0, p1, p2, p3, vb[2], vb[3]);
        }
      }
      if constexpr (kFused) {
        if (b + 1 == n_blk || (kb0 + kKeys) % kAttnSplitKeys == 0) {  // the split's last block: fold it
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if (!live[i] || row_lo[i] > row_hi[i]) continue;  // no key of the row in this split
            const float mn = fmaxf(fm[i], m[i]);
            const FoldStep f = fold_step<true>(fm[i], mn, m[i]);
            fm[i] = mn, fl[i] = fold(fl[i], l[i], f);
#pragma unroll
            for (int nt = 0; nt < D / 8; ++nt) {
              fo[nt][2 * i] = fold(fo[nt][2 * i], acc[nt][2 * i], f);
              fo[nt][2 * i + 1] = fold(fo[nt][2 * i + 1], acc[nt][2 * i + 1], f);
            }
          }
        }
      }
    }
    cp_async_wait<0>();
    if constexpr (kFused) {
      // The rows' outputs, normalised (every live row has a key: its own position).
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (!live[i]) continue;
        float* o = a.o + (static_cast<long long>(row_t[i]) * a.nh + row_h[i]) * D + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
          *reinterpret_cast<float2*>(o + 8 * nt) =
              make_float2(__fdiv_rn(fo[nt][2 * i], fl[i]), __fdiv_rn(fo[nt][2 * i + 1], fl[i]));
      }
    } else {
      // The split's partial per live row that has keys in it: [m (log2 domain), l, O[D]]. (A tile's splits
      // cover all its rows; a row outside its own window's splits has none, and the merge reads none there.)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (!live[i] || row_lo[i] > row_hi[i]) continue;
        const int sl = s_first - attn_first_split(a.window, row_pos[i]);
        float* part =
            a.partial + ((static_cast<long long>(row_t[i]) * a.nh + row_h[i]) * a.max_splits + sl) * (D + 2);
        if (lane % 4 == 0) part[0] = m[i], part[1] = l[i];
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          part[2 + 8 * nt + 2 * (lane % 4)] = acc[nt][2 * i];
          part[2 + 8 * nt + 2 * (lane % 4) + 1] = acc[nt][2 * i + 1];
        }
      }
    }
  }
}

// Rows of each launch class at most: a decode step, a prefill slice, a fused slice of a full layer. The tile
// table in shared memory is sized for the class, so a decode step's CTAs stay as small as the key blocks
// make them.
constexpr int kClassRows[3] = {kMaxSliceRows, kAttnSliceRows, kAttnFusedSliceRows};

template <int D, bool kFused>
cudaError_t launch_tc(const AttnArgs& a, int warps, cudaStream_t s) {
  const int cls = a.T <= kMaxSliceRows ? 0 : a.T <= kAttnSliceRows ? 1 : 2;
  const int smem = kv_smem_bytes<D>() + max_tiles(kClassRows[cls]) * int(sizeof(Tile));
  static const cudaError_t attr =
      cudaFuncSetAttribute(attn_tc_kernel<D, kFused>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kv_smem_bytes<D>() + max_tiles(kAttnFusedSliceRows) * int(sizeof(Tile)));
  if (attr != cudaSuccess) return attr;
  const int sms = device_sm_count(132);
  // The grid: as many CTAs as fit on the device at once (a function of the kernel and the slice class, not
  // of the step, so the decode graphs replay it), walking the items the step's positions need.
  static int resident[3][9] = {};
  if (resident[cls][warps] == 0) {
    int n = 0;
    const cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_tc_kernel<D, kFused>, 32 * warps, smem);
    if (e != cudaSuccess) return e;
    resident[cls][warps] = n < 1 ? 1 : n;
  }
  // Items at most: a tile has at least one pair, so tiles·nkv ≤ T·nh (fused); times the splits (split items).
  const long long most = static_cast<long long>(a.T) * a.nh * (kFused ? 1 : a.max_splits),
                  cap = 1LL * resident[cls][warps] * sms;
  const dim3 grid(static_cast<unsigned>(most < cap ? most : cap));
  return launch(attn_tc_kernel<D, kFused>, grid, dim3(32 * warps), static_cast<size_t>(smem), s, a);
}

template <int D>
cudaError_t launch_tc(const AttnArgs& a, int warps, cudaStream_t s) {
  return a.fused ? launch_tc<D, true>(a, warps, s) : launch_tc<D, false>(a, warps, s);
}

}  // namespace

bool attention_tc_supported(int d, int nh, int nkv) {
  return (d == 32 || d == 64 || d == 128) && nkv >= 1 && nh % nkv == 0 && nh / nkv <= 16;
}

cudaError_t raw_attention_tc_splits(const AttnArgs& a, int warps, cudaStream_t s) {
  if (!attention_tc_supported(a.d, a.nh, a.nkv) || (warps != 1 && warps != 4 && warps != 8) ||
      a.T > (a.fused ? kAttnFusedSliceRows : kAttnSliceRows))
    return cudaErrorInvalidValue;
  if (a.d == 128) return launch_tc<128>(a, warps, s);
  if (a.d == 64) return launch_tc<64>(a, warps, s);
  return launch_tc<32>(a, warps, s);
}

}  // namespace gridq::cuda::detail

// Launchers of the CUDA decode kernels. All pointers are device pointers; every launcher checks its
// arguments and the launch itself and fails closed with the call site in the message. Activations are BF16
// rows [M, K] (M = tokens, 1..16); weights are in the tiled layouts of relayout.h.
//
// Launch convention: kernels use programmatic dependent launch (PDL) when `pdl` is set: a kernel starts its
// prologue (shared-memory tables, L2 prefetch of its first weight bytes) while the previous kernel on the
// stream drains, and waits for that kernel (griddepcontrol.wait) before it reads activations or workspace.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace gridq::cuda {

inline constexpr int kMaxTokens = 16;  // rows of one GEMV launch
// Rows of one gemv() / gemv_swiglu() call: above kMaxTokens they run on the GEMM (gemm_impl.cuh) or as GEMV
// slices, every row with the bits of a GEMV launch.
inline constexpr int kMaxGemmRows = 1 << 16;

enum class WeightFormat { BF16, FP8, CB };

// One weight matrix [rows, in] resident on the device (or a stack of `experts` such matrices back to back,
// `expert_stride` bytes apart, for MoE).
struct DeviceMatrix {
  WeightFormat format = WeightFormat::BF16;
  int rows = 0, in = 0;
  const uint8_t* tiles = nullptr;    // tiled layout (relayout.h)
  long long expert_stride = 0;       // bytes between experts (MoE stacks)
  const float* row_scale = nullptr;  // FP8: weight_scale [rows] (per expert: + e·rows)
  // CB only:
  int k = 16, layout_version = 2;
  const uint16_t* codebook =
      nullptr;                      // [2 sub-tables][2^(k/2)][4] BF16 bits (converted from the FP16 sidecar)
  uint16_t v2_table_bf16[16] = {};  // v2: BF16 bits of T[c] (every entry exact E4M3, so exact in BF16)
};

// Cross-block split-K scratch. One workspace serves any number of kernels launched in order on ONE stream
// (each kernel touches it only after waiting for its predecessor); the counters are returned to zero by
// every kernel.
struct Workspace {
  int* counters = nullptr;      // [kMaxCounters], zero-initialised once
  float* partials = nullptr;    // [kMaxPartialFloats]
  unsigned* barrier = nullptr;  // [2] grid barrier of the persistent chain, zero-initialised once
  static constexpr long long kMaxCounters = 1 << 15;
  static constexpr long long kMaxPartialFloats = 1LL << 24;
};

enum class OutType { BF16, F32 };

// y[m, n] = sum_k W[n, k]·x[m, k] (FP32 accumulation), written as BF16 (rounded once) or FP32.
// BF16 and CB: x is BF16 [M, in] (for CB already through the FP4 activation contract).
// FP8 W8A8: x is E4M3 [M, in] with per-token scales xscale [M]; y = s_tok·weight_scale[n]·Σ.
struct GemvArgs {
  const DeviceMatrix* w = nullptr;
  int M = 1;
  const void* x = nullptr;
  const float* xscale = nullptr;
  void* y = nullptr;
  OutType out = OutType::BF16;
  // F32 only: y += W·x instead of y = W·x (row stride = the matrix's rows), each element's sum added once in
  // FP32 like a separate add kernel would: the residual add fused into the epilogue.
  bool accumulate = false;
};
Status gemv(const GemvArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl);

// Tuning knob of the work split: the fewest weight bytes one warp streams (default 8192). Fewer warps per
// matrix mean fewer split-K parts per 16-row tile; more warps mean more loads in flight.
void set_gemv_min_warp_bytes(long long bytes);
long long gemv_min_warp_bytes();
// Blocks per SM of a GEMV grid (0 = automatic: all that fit).
void set_gemv_blocks_per_sm(int n);
int gemv_blocks_per_sm();
// K-parts a tile of w's GEMM (gemv() of M > kMaxTokens rows, kStore): 1 unsplit, > 1 split over K at few
// token blocks, 0 where the format runs as GEMV slices or w is not a matrix gemv() takes.
int gemm_split_parts(const DeviceMatrix& w, int M);
// Bulk L2 prefetch of weight units ahead of the loads (default off: measured slower, docs/kernels.md).
void set_gemv_l2_prefetch(bool on);

// Persistent chain: runs the steps in order in ONE launch (one block per SM, all resident), a grid barrier
// between consecutive steps, so step i+1 may read anything step i wrote (e.g. x of step i+1 = y of step i).
// Weights of later steps stream while earlier steps finish; only activations wait for the barrier. All steps
// use one weight format (CB: one k and layout version) and one kind (all plain GEMV or all fused gate+up
// +SiLU·mul); 1..kMaxChainSteps steps. Each step is exactly what gemv() / gemv_swiglu() computes.
inline constexpr int kMaxChainSteps = 48;
struct ChainStep {
  const DeviceMatrix* w = nullptr;
  int M = 1;
  const void* x = nullptr;
  const float* xscale = nullptr;  // FP8 W8A8: per-token scales of x
  void* y = nullptr;              // swiglu: h, BF16 [M, rows/2]
  OutType out = OutType::BF16;    // plain GEMV only
  bool swiglu = false;
  bool qdq_fp4 = false;  // swiglu only
};
Status gemv_chain(const ChainStep* steps, int n, const Workspace& ws, cudaStream_t stream, bool pdl);
// How the chain's weight ring is filled: copy-engine bulk copies completing on mbarriers (true) or per-lane
// cp.async (false, default: measured equal or faster). Both compute the same bytes; kept for measurement.
void set_gemv_chain_copy_engine(bool on);
bool gemv_chain_copy_engine();

// Fused gate+up (+SiLU·mul) over a [2I, in] matrix whose rows 0..I-1 are gate and I..2I-1 up:
// h[m, i] = bf16(silu(bf16(gate))·bf16(up)), then optionally the FP4 activation QDQ (format.md §14.1) on each
// group of 16 consecutive i. h is BF16 [M, I]. BF16 and CB weights.
Status gemv_swiglu(const DeviceMatrix& w, int M, const void* x, uint16_t* h, bool qdq_fp4,
                   const Workspace& ws, cudaStream_t stream, bool pdl);

// ---- Activation kernels ----

// FP8 per-token contract (format.md §14.2) in (codes, scale) form: q [M, K] E4M3, s [M].
Status quantize_fp8_tokens(const uint16_t* x, int M, int K, uint8_t* q, float* s, cudaStream_t stream,
                           bool pdl);
// FP4 group-16 QDQ (format.md §14.1), BF16 -> BF16; K % 16 == 0.
Status qdq_fp4(const uint16_t* x, int M, int K, uint16_t* y, cudaStream_t stream, bool pdl);
// y = bf16(x · rsqrt(mean(x²) + eps) · w), FP32 math; with optional fused FP4-QDQ'd copy (y_fp4) and FP8
// per-token (codes, scale) copy of y (y_q, y_s). Any optional output may be null.
struct RmsNormArgs {
  const uint16_t* x = nullptr;  // [M, H] BF16
  const uint16_t* w = nullptr;  // [H] BF16
  int M = 1, H = 0;
  float eps = 1e-6f;
  uint16_t* y = nullptr;  // [M, H]
  uint16_t* y_fp4 = nullptr;
  uint8_t* y_q = nullptr;
  float* y_s = nullptr;
};
Status rmsnorm(const RmsNormArgs& a, cudaStream_t stream, bool pdl);

// ---- MoE decode ----

// Router: logits [M, E] FP32 -> per token top-k of sigmoid(logit) + bias (bias only selects), weights
// sigmoid/Σ over the chosen set. Writes the union of chosen experts as "slots" (ascending expert id):
// nslots[0], slot_expert[slot], slot_weight[slot, M] (0 for a token that did not choose that expert).
struct RouteArgs {
  const float* logits = nullptr;
  const float* bias = nullptr;  // [E] FP32
  int M = 1, E = 256, topk = 10;
  int* nslots = nullptr;
  int* slot_expert = nullptr;    // [M·topk]
  float* slot_weight = nullptr;  // [M·topk, M]
  int* topk_ids = nullptr;       // [M, topk] (optional, for tests)
  float* topk_w = nullptr;       // [M, topk]
};
Status route(const RouteArgs& a, cudaStream_t stream, bool pdl);

// Routed experts, all slots of one layer in one launch each:
//  gate_up: h[slot, m, :] = FP4QDQ(silu(gate)·up) of expert slot_expert[slot] on x (FP4-QDQ'd BF16 [M, H]).
//  down:    out[m, :] = bf16(routed_scale · Σ_slot slot_weight[slot, m]·down_e(h[slot, m, :]) + add[m, :]).
// `max_slots` bounds nslots (sizes the grid); `add` (FP32 [M, H], e.g. the shared expert) may be null.
struct MoeArgs {
  const DeviceMatrix* gate_up = nullptr;  // stack [E][2I, H], CB
  const DeviceMatrix* down = nullptr;     // stack [E][H, I], CB
  int M = 1, max_slots = 10;
  const uint16_t* x = nullptr;  // [M, H]
  const int* nslots = nullptr;
  const int* slot_expert = nullptr;
  const float* slot_weight = nullptr;
  uint16_t* h = nullptr;  // [max_slots, M, I] scratch
  float routed_scale = 1.0f;
  const float* add = nullptr;
  uint16_t* out = nullptr;  // [M, H]
};
Status moe_gate_up(const MoeArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl);
Status moe_down(const MoeArgs& a, const Workspace& ws, cudaStream_t stream, bool pdl);

// Routed experts grouped by expert, for any number of rows (moe_grouped.cu): the T·k (token, expert) pairs of
// a step (eid [T, k]: route_tokens' output) are sorted by expert on the device, and each expert's weights are
// decoded once per block of its pairs. Pair p = t·k + j:
//   h[p, :] = FP4QDQ(bf16(silu(gate_e·x[t])·(up_e·x[t])))   (x: the FP4-QDQ'd BF16 rows [T, H])
//   (qdq_fp4 false, the w4a16 contract: no FP4QDQ of h, and the caller passes the unquantized rows as x)
//   y[p, :] = down_e · h[p, :]                             FP32 [T·k, H]
// A pair's sums run over the whole K of a tile in one warp, units in order: its bits depend on its own
// inputs only, whatever else is in the step (batch invariance by construction). The combine is the caller's
// (raw_moe_combine). NVFP4-CB K16 v2 stacks only.
struct GroupedMoeArgs {
  const DeviceMatrix* gate_up = nullptr;  // stack [E][2I, H]
  const DeviceMatrix* down = nullptr;     // stack [E][H, I]
  int T = 0, k = 0, E = 0;
  const int* eid = nullptr;     // [T, k]
  int* grp = nullptr;           // scratch, grouped_moe_grp_ints(T, k, E) ints
  const uint16_t* x = nullptr;  // [T, H]
  float* gu = nullptr;          // [T·k, 2I] scratch: gate and up sums (wide items; narrow ones write h)
  uint16_t* h = nullptr;        // [T·k, I] scratch (wide items: unit-permuted, raw_permute_units' layout)
  float* y = nullptr;           // [T·k, H]
  uint16_t* xp = nullptr;       // [T, H] scratch: x unit-permuted for the wide items
  int wide =
      -1;  // items of 16 tiles × 64 pairs: 1 always, 0 never, -1 when the step has ≥ 16 pairs per expert
  bool qdq_fp4 = true;  // h through the FP4 group-16 QDQ (w4a4); false: BF16 h (w4a16)
  // Narrow items of two tiles (gate_up: a gate tile with its up tile and the SwiGLU epilogue; down: two
  // adjacent tiles): 1 always, 0 never, -1 from 16 tokens a step. The same bits either way.
  int paired = -1;
};
inline long long grouped_moe_grp_ints(int T, int k, int E) {
  return 3LL * (E + 1) + static_cast<long long>(T) * k;
}
Status grouped_moe(const GroupedMoeArgs& a, cudaStream_t stream, bool pdl);
// Whether grouped_moe runs a's step as wide items (16 tiles × 64 pairs on a CTA, warpgroup MMAs).
bool grouped_moe_wide(const GroupedMoeArgs& a);

// ---- Test / bench helpers ----

// Decodes a CB matrix to dense BF16 [rows, in] through the same fragment decoder the GEMV uses (tests only:
// serving never expands weights).
Status cb_decode_dense(const DeviceMatrix& w, uint16_t* out, cudaStream_t stream);

// Fills device memory with deterministic pseudo-random data: uniform bytes; BF16 uniform in [-a, a];
// E4M3 bytes without NaN; CB tiles whose index bytes are uniform and whose v2 planes hold legal (E, c)
// pairs with E in [e_lo, e_hi] (v1: random E4M3 scales in a normal range).
Status fill_random_bytes(void* p, size_t n, uint64_t seed, cudaStream_t stream);
Status fill_random_bf16(uint16_t* p, size_t n, float a, uint64_t seed, cudaStream_t stream);
Status fill_random_e4m3(uint8_t* p, size_t n, uint64_t seed, cudaStream_t stream);
Status fill_random_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t stream);
Status fill_random_cb_tiles(uint8_t* p, int k, int layout_version, long long units, uint64_t seed,
                            cudaStream_t stream);

}  // namespace gridq::cuda

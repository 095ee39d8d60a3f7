// Internal interface between the host-side API (api.cpp, compiled by the host compiler) and the kernel
// translation units (*.cu). Plain data and cudaError_t only: the .cu files never include core/status.h,
// because nvcc's front end cannot compile fmt's compile-time format checks.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gridq::cuda::detail {

inline constexpr long long kMaxCounters = 1 << 15;
inline constexpr long long kMaxPartialFloats = 1LL << 24;

enum Mode : int {
  kStore = 0,  // y = acc (· scales), BF16 or FP32
  kSwiglu =
      1,  // unit = gate tile + up tile; h = silu(gate)·up (+FP4 QDQ); MoE slots when slot_expert != null
  kMoeDown = 2  // tile's K-run spans all slots; fold with routing weights; out = scale·Σ + add
};

enum Fmt : int { kFmtBF16 = 0, kFmtFP8 = 1, kFmtCB = 2 };

struct KParams {
  const uint8_t* w;
  long long expert_stride;
  const float* row_scale;
  const uint16_t* codebook;
  int stab[16];  // CB v2: BF16 bits of T[c] minus 127<<7
  int rows;      // output rows (kSwiglu: I, the gate half)
  int R;         // 16-row tiles per matrix (kSwiglu: of the gate half)
  int S;         // units along K
  int K;
  int M;
  const void* x;
  const float* xscale;
  void* y;
  int y_f32;
  int y_accum;  // kStore into F32: y[o] = y[o] + value (the residual add fused; one writer per element)
  int qdq_fp4;
  const int* nslots;
  const int* slot_expert;
  const float* slot_weight;
  float out_scale;
  const float* add;
  int max_slots;
  int* counters;
  float* partials;
  int l2_prefetch;  // 1: bulk-prefetch weight units into L2 ahead of the loads
  // Diagnostics (bench --diag): when set, per block [start, tables ready, dependency released, end] in
  // %globaltimer ns at trace[4·block ...]; null in normal use.
  unsigned long long* trace;
  int warps;  // persistent chain: warps that split this phase (0 = all); set by the launcher
};

// Persistent chain (chain_impl.cuh): `n` GEMV phases of one format and mode in one launch, a grid barrier
// between consecutive phases (phase i+1 reads its activations only after every output of phase i is written);
// weight bytes stream through each warp's ring across phase boundaries. Passed by value (≈ 11 KB of kernel
// parameters at 48 phases; sm_90 allows 32 KB).
inline constexpr int kMaxChainPhases = 48;
struct ChainParams {
  int n;
  int pdl;
  int bulk;                   // 1: the ring is filled by copy-engine bulk copies (mbarriers); 0: cp.async
  unsigned* bar;              // 2 words, zero once (Workspace::barrier)
  unsigned long long* trace;  // diagnostics: [n][blocks][2] = (past the barrier, phase done); null normally
  KParams ph[kMaxChainPhases];
};

// Grouped routed experts (moe_grouped.cu): kp describes the expert stack (kp.x the activations, kp.y the
// output, kp.rows the output rows: I for gate_up, H for down); grp the prepared pair lists.
struct ExpertParams {
  KParams kp;
  const int* grp;
  int E;
  int x_div;  // activation row of pair p: p / x_div (gate_up: k, a token's pairs share its row; down: 1)
  int ldy;    // output row stride (fused gate_up: of h, BF16; else of gu or y, FP32)
  int qdq_fp4 = 0;  // paired gate_up: the FP4 QDQ after the SwiGLU (w4a4)
  int pair = 0;     // items of two tiles: gate_up a gate tile + its up tile, writing h (SwiGLU epilogue);
                    // down two adjacent tiles (R even)
};
// Sorts the P = T·k pairs of eid by expert into grp (int [3·(E+1) + P]) and counts the items of both
// kernels (blocks of nb pairs × r_gu gate tiles / r_dn down tiles). One block: its shared memory is
// group_pairs_smem_bytes (the caller checks it against the device's limit): the per-warp histogram and the
// pairs' expert ids as 16-bit values (E ≤ 1024), 192 KiB for 8192 rows × 10 pairs and 256 experts.
constexpr long long group_pairs_smem_bytes(long long P, long long E) {
  return (32 + 32 * E) * 4 + (P + 1) / 2 * 4;
}
cudaError_t raw_group_pairs(const int* eid, int P, int E, int nb, int r_gu, int r_dn, int* grp,
                            cudaStream_t s, bool pdl);
// gate_up: gu [P, 2I] FP32 (gate rows, then up rows; group_pairs' r_gu = 2I/16), or with p.pair h [P, I] BF16
// = the SwiGLU (+ FP4 QDQ) of the gate and up rows (kp.y = h, ldy = I; r_gu = I/16: an item is a gate tile
// with its up tile); down: y [P, H] FP32 (with p.pair r_dn = H/32: an item is two adjacent tiles). nt token
// tiles per item (the same nt as group_pairs' nb = 8·nt); built for nt = 1.
cudaError_t raw_grouped_experts(bool gate_up, int nt, const ExpertParams& p, cudaStream_t s, bool pdl);
// The same outputs, bit for bit, with items of 16 tiles × 64 pairs on a CTA (moe_grouped_wide.cu), except
// that gate_up writes gu [P, 2I] FP32 (raw_swiglu_pairs makes h) and that the activations kp.x (gate_up: the
// rows, down: h) are unit-permuted (raw_permute_units; raw_swiglu_pairs with perm): group_pairs with nb =
// kWidePairs and r_gu / r_dn = tile groups of kWideTiles.
cudaError_t raw_grouped_wide(bool gate_up, const ExpertParams& p, cudaStream_t s, bool pdl);
inline constexpr int kWidePairs = 64, kWideTiles = 16;
// The wide items' unit permutation: word w (a BF16 pair) of a 256-column unit is stored at unit_word_slot(w),
// so that 16-byte chunk q of a row holds the words the warpgroup MMAs read together (moe_grouped_wide.cu);
// unit_word_at(d) is the word stored at d. Both take 0 <= w, d < 128.
constexpr int unit_word_slot(int w) { return 4 * (w & 31) + (w >> 5); }
constexpr int unit_word_at(int d) { return 32 * (d & 3) + (d >> 2); }
constexpr bool unit_words_inverse() {
  for (int w = 0; w < 128; ++w)
    if (unit_word_slot(w) >= 128 || unit_word_at(unit_word_slot(w)) != w) return false;
  return true;
}
static_assert(unit_words_inverse());
// xp [rows, cols] BF16 = x with each 256-column unit's words at unit_word_slot. cols % 256 == 0.
cudaError_t raw_permute_units(const uint16_t* x, int rows, int cols, uint16_t* xp, cudaStream_t s, bool pdl);
// h [P, I] = FP4QDQ(bf16(silu(bf16(gate))·bf16(up))) from gu [P, 2I] (the GEMV SwiGLU epilogue's
// arithmetic); perm: h unit-permuted (I % 256 == 0).
cudaError_t raw_swiglu_pairs(const float* gu, int P, int I, uint16_t* h, bool qdq_fp4, bool perm,
                             cudaStream_t s, bool pdl);

// Launches the GEMV engine for (format, k, layout_version, mode, token tiles nt = 1|2). Returns
// cudaErrorNotSupported when that combination is not instantiated.
cudaError_t raw_gemv(int fmt, int k, int v, int mode, int nt, const KParams& p, long long max_units,
                     cudaStream_t s, bool pdl, long long min_warp_bytes);
// The GEMM for M > 16 rows (gemm_impl.cuh): the same bits per row as raw_gemv over the same matrix, kStore
// and kSwiglu. cudaErrorNotSupported for a format without a GEMM instantiation (the caller runs GEMV slices).
cudaError_t raw_gemm(int fmt, int k, int v, int mode, const KParams& p, cudaStream_t s, bool pdl,
                     long long min_warp_bytes);
// K-parts a tile of the raw_gemm launch for these arguments: 1 unsplit, P > 1 split over K (gemm_impl.cuh).
cudaError_t raw_gemm_parts(int fmt, int k, int v, int mode, const KParams& p, long long min_warp_bytes,
                           int& parts);
// Blocks of the GEMV launch over `units` units of a matrix of this format and mode (launch.cuh gemv_grid),
// for the formats that have a GEMM.
cudaError_t raw_gemv_grid(int fmt, int k, int v, int mode, long long units, long long min_warp_bytes,
                          long long& blocks);
// Launches the persistent chain for (format, k, layout_version, mode, nt); c.ph[i].warps are filled in here.
// Returns cudaErrorNotSupported when that combination is not instantiated.
cudaError_t raw_gemv_chain(int fmt, int k, int v, int mode, int nt, ChainParams& c, cudaStream_t s,
                           long long min_warp_bytes);
// Diagnostics: while set, chain launches record per-phase block timestamps there ([n][blocks][2] words).
void raw_set_chain_trace(unsigned long long* base);
// The chain's ring: copy-engine bulk copies (true) or per-lane cp.async (false, default).
void raw_set_chain_bulk(bool on);
bool raw_chain_bulk();
void raw_set_blocks_per_sm(int n);
void raw_set_l2_prefetch(bool on);  // 0 = automatic (half the occupancy)
int raw_blocks_per_sm();
// Diagnostics: while `base` is set, each GEMV launch gets its own trace slice (4 words per block) taken from
// `base` in launch order; returns the words used so far.
void raw_set_trace(unsigned long long* base, long long capacity);
long long raw_trace_used();
cudaError_t raw_cb_decode(int k, int v, const KParams& p, uint16_t* out, cudaStream_t s);

cudaError_t raw_quantize_fp8(const uint16_t* x, int M, int K, uint8_t* q, float* s, cudaStream_t st,
                             bool pdl);
cudaError_t raw_qdq_fp4(const uint16_t* x, int M, int K, uint16_t* y, cudaStream_t st, bool pdl);
cudaError_t raw_rmsnorm(const uint16_t* x, const uint16_t* w, int M, int H, float eps, uint16_t* y,
                        uint16_t* y_fp4, uint8_t* y_q, float* y_s, cudaStream_t st, bool pdl);
cudaError_t raw_route(const float* logits, const float* bias, int M, int E, int topk, int* nslots,
                      int* slot_expert, float* slot_weight, int* topk_ids, float* topk_w, cudaStream_t st,
                      bool pdl);

// Diagnostic kernels (diag.cu).
cudaError_t raw_diag_empty(int blocks, bool pdl, cudaStream_t s);
cudaError_t raw_diag_stream(const void* src, size_t bytes, uint32_t* out, int blocks_per_sm, bool pdl,
                            bool early, cudaStream_t s);
cudaError_t raw_diag_stream_persistent(const void* src, size_t bytes_each, int count, uint32_t* out,
                                       unsigned* bar, cudaStream_t s);

cudaError_t raw_fill_bytes(void* p, size_t n, uint64_t seed, cudaStream_t s);
cudaError_t raw_fill_bf16(uint16_t* p, size_t n, float a, uint64_t seed, cudaStream_t s);
cudaError_t raw_fill_e4m3(uint8_t* p, size_t n, uint64_t seed, cudaStream_t s);
cudaError_t raw_fill_f32(float* p, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s);
cudaError_t raw_fill_cb_tiles(uint8_t* p, int k, int v, long long units, uint64_t seed, cudaStream_t s);

// The quantizer's second moments (hessian.cu, hessian.h): H's upper-triangle tiles += the 256-row block sums
// of x [rows, cols]; dst = x · scale (per row).
inline constexpr long long kHessianBlockRows = 256;
cudaError_t raw_hessian_tiles(const float* x, long long rows, int cols, float* H, cudaStream_t s);
cudaError_t raw_scale_rows(const float* x, const float* scale, long long n, int cols, float* dst,
                           cudaStream_t s);

}  // namespace gridq::cuda::detail

// Launchers of the forward's device kernels that are not GEMVs over tiled weights (those are kernels.h):
// embedding, RMSNorm, QK-norm + RoPE + KV write, attention, the output gate, residual adds, SwiGLU, routing,
// the MoE combine, and the any-format reference matvec. Plain data and cudaError_t only (gpu-engine.md §1:
// device code is a leaf); the host-side checks and messages live in forward.cpp / device_model.cpp.
//
// Shapes: T = rows of the step (≤ kMaxStepRows; ≤ kAttnSliceRows for rope/attention), H = hidden,
// d = head_dim, nh / nkv = query / KV heads.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace gridq::cuda::detail {

// Rows of one forward step at most (step_rows_for below picks a step's rows): a prefill chunk's rows share
// every weight read, so a long prompt reads the routed experts once per step instead of once per 64 — 320
// pairs per expert of Laguna-S-2.1 at 8192 rows, five full 64-pair wide items, where 4096 rows decode each
// expert tile 3 times for 160 pairs and 2048 twice for 80 (H100, session 32: 4096 against 2048, 8k prompt
// 1,147 -> 1,079 ms, the same bits; ≈ 380 KB of step buffers a row). The grouped experts' pair sort holds a
// step's T·k expert ids in one block's shared memory (group_pairs_smem_bytes: 192 KiB at 8192 × 10 pairs and
// 256 experts), which bounds it. The GEMM and the grouped experts take any row count; a row's bits never
// depend on the step's size.
inline constexpr int kMaxStepRows = 8192;
// Rows of a decode graph and of one step's logit rows (sampling's scratch is vocabulary-wide per row); the
// attention split buffer holds this many rows at the longest context.
inline constexpr int kMaxSliceRows = 64;
// Rows of one step for a requested token budget (`--max-num-batched-tokens`, DeviceOptions): 0 takes
// kDefaultStepRows; else at least a decode graph's rows and at most kMaxStepRows. The step buffers scale
// with it (≈ 380 KB a row on Laguna-S-2.1), so a smaller budget leaves more memory for KV.
// (runtime/device.h kCudaStepTokens, the engine's prefill chunk, is held equal to it in cuda_backend.cpp.)
inline constexpr int kDefaultStepRows = 4096;
static_assert(kMaxSliceRows <= kDefaultStepRows && kDefaultStepRows <= kMaxStepRows);
constexpr int step_rows_for(long long asked) {
  return asked <= 0 ? kDefaultStepRows
                    : static_cast<int>(std::clamp<long long>(asked, kMaxSliceRows, kMaxStepRows));
}
// Rows of one QK-norm/RoPE/KV-write + attention launch at most. A step of more rows runs its attention as
// slices in row order, each writing its K/V right before reading: the sliding-window rings then need only
// window + kAttnSliceRows slots whatever the step size. A slice is cut shorter where its rows' splits would
// not fit the split buffer (fwd::attention).
inline constexpr int kAttnSliceRows = 256;
// Rows of one attention launch at most on a full (paged) layer of a step that runs fused items
// (AttnArgs::fused): no ring bounds it and no split buffer is read, only the tile table in shared memory.
inline constexpr int kAttnFusedSliceRows = 1024;
inline constexpr int kAttnSplitKeys = 256;  // keys per attention split: fixed, so the merge order is too
inline constexpr int kMaxHeadDim = 256;
// The first key a row at pos attends to: pos − window + 1 on a sliding layer (window > 0), else 0.
__host__ __device__ inline int attn_first_key(int window, int pos) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}
// A row's first split: the one holding its first key. Split s of a row sits at slot s − first in its
// partials, so a sliding layer's rows need ⌈window / kAttnSplitKeys⌉ + 1 slots at any position, and its
// prefill slices keep kAttnSliceRows rows deep into a prompt.
__host__ __device__ inline int attn_first_split(int window, int pos) {
  return attn_first_key(window, pos) / kAttnSplitKeys;
}
// The splits a row reads (all of them non-empty): first … pos / kAttnSplitKeys.
__host__ __device__ inline int attn_row_splits(int window, int pos) {
  return pos / kAttnSplitKeys - attn_first_split(window, pos) + 1;
}

// Whether the forward's launches use programmatic dependent launch (pdl_launch.cuh; on unless switched off,
// e.g. by `gridq bench decode --no-pdl` to measure what it buys).
bool forward_pdl();
void set_forward_pdl(bool on);

// Which weights a decode step asks into L2 ahead of their kernels (l2_ahead.cu), a mask of kL2Ahead*: the
// chosen experts' stacks once the router has run (or their down stack alone, read after the gate_up that
// streams meanwhile), the next layer's q/k/v while the MoE runs, this layer's o_proj and router while
// attention runs. A prefetch changes no value, so the choice may depend on the step's rows.
// Default kL2AheadAuto: o_proj for steps of at most kL2AheadAutoRows rows, whose attention leaves the
// memory system idle (H100, session 46: batch 1 +6.4 % at 1k and +5 % at 32k, 4 +2.5 %, 16 +1.5 %, 32
// -0.8 %, 64 -1.4 %; the experts' and the next q/k/v's prefetch lost at every batch measured; session 47:
// the down stack and the router beside o_proj −0.8 % and flat at batch 1);
// `bench decode --l2-ahead` sets a fixed mask.
inline constexpr int kL2AheadExperts = 1, kL2AheadNextQkv = 2, kL2AheadO = 4, kL2AheadDown = 8,
                     kL2AheadRouter = 16, kL2AheadAll = 31;
inline constexpr int kL2AheadAuto = -1, kL2AheadAutoRows = 16;
int forward_l2_ahead();
void set_forward_l2_ahead(int mask);
// The mask a step of T rows uses.
inline int forward_l2_ahead_mask(int T) {
  const int m = forward_l2_ahead();
  return m != kL2AheadAuto ? m : T <= kL2AheadAutoRows ? kL2AheadO : 0;
}
// Which small matrices a step runs on the side stream beside the main one (forward_layers.cpp), a mask of
// kBeside*: the shared expert beside the router and the routed experts, g_proj beside RoPE and attention.
// A matrix not beside runs on the main stream in its place. No value changes. Default both;
// `bench decode --beside` sets it (the grouped experts hold every SM's registers, so the side stream's
// kernels may wait for them: which order is faster is measured, not assumed).
inline constexpr int kBesideShared = 1, kBesideGate = 2, kBesideAll = 3;
int forward_beside();
void set_forward_beside(int mask);
// Bulk L2 prefetch of [p, p + bytes) (16-byte aligned), and of slice ids[i] (< E) of each of the stacks a
// and b (b optional) for i < n_ids. Plain launches: they read nothing another kernel of the step writes but
// ids, which the caller orders before them.
cudaError_t raw_l2_ahead(const void* p, long long bytes, cudaStream_t s);
cudaError_t raw_l2_ahead_experts(const int* ids, int n_ids, int E, const void* a, long long a_stride,
                                 const void* b, long long b_stride, cudaStream_t s);

// x[t, :] = float(table[ids[t], :]), table BF16 [V, H].
cudaError_t raw_embed(const uint16_t* table, const int* ids, int T, int H, float* x, cudaStream_t s);

// y[t, :] = bf16(w ⊙ (x[t] · 1/sqrt(mean(x[t]²) + eps))), x FP32 [T, H] (sum of squares in FP64, as the CPU
// reference), w FP32 [H]; y32 (optional) gets the same values before the BF16 rounding.
cudaError_t raw_rmsnorm_f32(const float* x, const float* w, int T, int H, float eps, uint16_t* y, float* y32,
                            cudaStream_t s);
// The same, also writing the next matrices' input contract from y (each optional): y_fp4 BF16 [T, H] FP4
// group-16 QDQ, y_q / y_s E4M3 codes [T, H] and per-token scales [T] (bit for bit qdq_fp4 / quantize_fp8 of
// y).
cudaError_t raw_rmsnorm_f32_contracts(const float* x, const float* w, int T, int H, float eps, uint16_t* y,
                                      float* y32, uint16_t* y_fp4, uint8_t* y_q, float* y_s, cudaStream_t s);

// x[t, c] += y[t·ld_y + c] for t < T, c < H (FP32 y, or BF16 when y_bf16): the rows of a GEMV output whose
// padding rows (ld_y > H) are skipped.
cudaError_t raw_add(float* x, const void* y, bool y_bf16, long long ld_y, int T, int H, cudaStream_t s);

// h[t, i] = bf16(silu(g[t, i]) · u[t, i]); g at gu + t·ld, u at gu + t·ld + up_off (FP32).
cudaError_t raw_swiglu(const float* gu, long long ld, long long up_off, int T, int I, uint16_t* h,
                       cudaStream_t s);

// Where the KV of a row lives. Full layers: token j of the row's sequence is at page
// page_table[seq_slot·max_pages + j / page_tokens], in-page slot j % page_tokens; K of the layer at
// pool + page·page_bytes + k_off + slot·kvw, V at + v_off. Sliding layers: ring of the sequence at
// rings + seq_slot·ring_seq_bytes + k_off (V + v_off), slot j % ring_slots. Offsets in BF16 elements.
struct KvView {
  uint16_t* base = nullptr;        // page pool (full) or ring pool (sliding)
  long long k_off = 0, v_off = 0;  // elements
  long long page_elems = 0;        // full: elements per page (all full layers); sliding: per sequence
  int page_tokens = 0;             // full: tokens per page; sliding: ring slots
  int sliding = 0;
  const int* page_table = nullptr;  // full: [max_seqs, max_pages]
  int max_pages = 0;
  int kvw = 0;  // elements of one position's K (or V) row: n_kv · d
};

struct RowInfo {        // per row of a step, on the device
  const int* pos;       // [T] absolute position
  const int* seq_slot;  // [T] sequence slot
  // [T] 0: the row's full-layer K/V are already in pages the sequence shares (a prefix-cache hit, recomputed
  // only to rebuild the sliding-layer rings): not written. Null: every row writes.
  const int* kv_write = nullptr;
};

// q FP32 rows [T, nh·d] at q_src (row stride ld_q), k and v [T, nkv·d] at k_src / v_src. Per head: RMSNorm
// with q_norm / k_norm (FP32 [d], null = none), then NeoX RoPE on the first `rot` dims with fp32 angles
// pos·inv_freq[i] and attention factor m on cos and sin. Writes q FP32 [T, nh, d] and the row's K (normed,
// roped) and V into the cache as BF16.
struct RopeArgs {
  const float *q_src = nullptr, *k_src = nullptr, *v_src = nullptr;
  long long ld_q = 0, ld_k = 0, ld_v = 0;
  int T = 0, nh = 0, nkv = 0, d = 0, rot = 0;
  float eps = 1e-6f, m = 1.0f;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;  // [rot/2]
  float* q = nullptr;
  KvView kv;
  RowInfo rows;
};
cudaError_t raw_qk_rope_kv(const RopeArgs& a, cudaStream_t s);

// o FP32 [T, nh, d] = softmax(q·Kᵀ/sqrt(d)) V over keys j ≤ pos (and j > pos − window when window > 0) of the
// row's sequence, GQA head h → kv head h / (nh / nkv). Keys are cut in splits of kAttnSplitKeys positions
// (fixed by position, not by batch) folded in split order (attn_fold.cuh). partial: [T·nh, max_splits, d + 2]
// FP32, split s of a row at slot s − attn_first_split.
struct AttnArgs {
  const float* q = nullptr;
  int T = 0, nh = 0, nkv = 0, d = 0, window = 0;
  int max_splits = 0;  // partial slots a row: ≥ attn_row_splits of every row of the step
  // Warps per CTA of the tensor-core path (attention_tc.h): 1, 4 or 8 (fwd::attention_warps). Only the
  // speed depends on it.
  int tile_warps = 1;
  // Tensor-core path only: one item per (tile, KV head) folds all the tile's splits itself (attn_fold.cuh)
  // and writes o; no partials, no merge. For prefill slices (few long items, ≤ kAttnFusedSliceRows rows);
  // split items (0) keep a decode step's parallelism at long context. Only the speed depends on it.
  int fused = 0;
  KvView kv;
  RowInfo rows;
  float* partial = nullptr;
  float* o = nullptr;
};
cudaError_t raw_attention(const AttnArgs& a, cudaStream_t s);

// out[t, h·d + e] = bf16(o[t, h·d + e] · softplus(g)) with g = g[t·ld_g + h] (per head, mode 1) or
// g[t·ld_g + h·d + e] (per element, mode 2); mode 0: bf16(o).
cudaError_t raw_gate(const float* o, const float* g, long long ld_g, int mode, int T, int nh, int d,
                     uint16_t* out, cudaStream_t s);
// The same, also writing the FP8 per-token contract of out (q E4M3 [T, nh·d], s [T]) for an FP8 o_proj: bit
// for bit quantize_fp8 of out.
cudaError_t raw_gate_fp8(const float* o, const float* g, long long ld_g, int mode, int T, int nh, int d,
                         uint16_t* out, uint8_t* q, float* s, cudaStream_t st);

// Router: z FP32 [T, E] (row stride ld) → top-k per row on score + bias (bias may be null; only selects),
// score sigmoid (softmax = 0) or softmax (1); weights renormalised when renorm. The chosen experts of a row
// are written sorted by expert id (the CPU reference's accumulation order): ids [T, k], w [T, k].
cudaError_t raw_route_tokens(const float* z, long long ld, const float* bias, int T, int E, int k,
                             int softmax, int renorm, int* ids, float* w, cudaStream_t s);

// o[t, :] = scale · Σ_j w[t, j] · y[t, j, :] (+ add[t·ld_add + :], the shared expert), j ascending (FP32);
// y [T, k, H]. out[t, :] = o, or out[t, :] += o when accumulate (out the residual stream).
cudaError_t raw_moe_combine(const float* y, const float* w, int T, int k, int H, float scale,
                            const float* add, long long ld_add, bool accumulate, float* out, cudaStream_t s);

// ---- The reference matvec: every weight format, any row count, expert stacks (the path for shapes and
// formats the tiled GEMV does not serve). One warp per output row, lanes over 8-weight codewords, a fixed
// lane order and tree: batch-invariant by construction. ----
enum RefFormat : int { kRefBF16 = 0, kRefF32 = 1, kRefFP8 = 2, kRefCB = 3 };
struct RefMatrix {
  int format = kRefBF16;
  int rows = 0, cols = 0;
  const uint8_t* data = nullptr;     // canonical bytes: expert e at data + e·expert_stride
  long long expert_stride = 0;       // bytes
  long long row_bytes = 0;           // bytes per row
  const float* row_scale = nullptr;  // FP8 / fp8-grid CB: [experts·rows]
  int act_bits = 16;                 // input contract: 16 none, 8 FP8 per-token QDQ, 4 FP4 group-16 QDQ
  // CB only (product mode):
  int cb_fp8 = 0;  // grid: 0 fp4, 1 fp8
  int k = 16, layout_version = 2;
  int n_sub = 2, sub_dim = 4;
  int sub_bits[4] = {}, sub_off[4] = {};  // widths and offsets of the sub-indices in a code
  int table_off[4] = {};                  // first float of each sub-table in `codebook`
  const float* codebook = nullptr;        // sub-tables [2^b_i, sub_dim] FP32, back to back
  float v2_table[16] = {};                // v2 scale table T[c]
};
// y[p·ld_y + r] = Σ_c W_e[r, c] · x̂[c] for pairs p < P, e = ids ? ids[p] : 0, x̂ = contract(x row p / x_div)
// (x BF16 rows of `cols`; x_div = 1: a row per pair, = k: the k experts of a token share its row). FP8 W8A8
// rounds y to BF16 as format.md §12 says; every other format keeps the FP32 sum, as the CPU reference.
struct RefArgs {
  RefMatrix w;
  int P = 0;
  const int* ids = nullptr;
  const uint16_t* x = nullptr;
  const float* x_f32 = nullptr;  // instead of x: FP32 rows (the router, act_bits 16 only)
  int x_div = 1;
  float* y = nullptr;
  long long ld_y = 0;
};
cudaError_t raw_ref_matvec(const RefArgs& a, cudaStream_t s);
// The same sums for a prefill step's router (BF16 weights, FP32 rows, no ids, cols % 256 == 0) through
// shared-memory tiles: raw_ref_matvec takes it past a decode step's rows; cudaErrorNotSupported otherwise.
cudaError_t raw_ref_matvec_tiled(const RefArgs& a, cudaStream_t s);

}  // namespace gridq::cuda::detail

// Internal to the CUDA backend: one step's rows and the step buffers (forward.cpp), shared by
// cuda_backend.cpp.
#pragma once

#include <vector>

#include "runtime/cuda/cuda_backend.h"

namespace gridq::cuda {

struct CudaBackend::Step {
  std::vector<int> ids, pos, slot;  // [T] token, absolute position, sequence slot
  std::vector<int> kv_write;        // [T] 1: write the row's full-layer KV (0: a shared prefix page holds it)
  std::vector<int> logit_rows;      // rows (< T) whose logits are wanted, ascending
  // forward_sampled: one plan per logit row (null: not sampled); the rows are sampled on the device and
  // only their tokens come back (sampling.cpp).
  bool sampled = false;
  std::vector<const runtime::SamplePlan*> plans;
  int T() const { return static_cast<int>(ids.size()); }
};

// Every activation buffer of a step, sized once from the spec for R = step_rows rows (shape per field);
// the logit and sampling buffers for L = kMaxSliceRows rows, the attention splits for one slice of as many.
struct CudaBackend::Work {
  DeviceBuffer rows;    // int [4][T]: ids, pos, seq_slot, kv_write (T = the step's rows)
  DeviceBuffer x;       // f32 [R, H] residual stream
  DeviceBuffer a;       // bf16 [R, H] normed input of a block
  DeviceBuffer a32;     // f32 [R, H] the same before rounding (the router's input)
  DeviceBuffer xin;     // bf16 [R, W] contract copy (FP4 QDQ) of a tiled GEMV's input, W = widest input
  DeviceBuffer xq, xs;  // u8 [R, W] FP8 codes, f32 [R] per-token scales
  DeviceBuffer qkv, g;  // f32 [R, qkv rows], [R, g rows] (padded rows)
  DeviceBuffer q, o;    // f32 [R, n_h·d]
  DeviceBuffer ob;      // bf16 [R, n_h·d] gated attention output
  DeviceBuffer y;       // f32 [R, Y] o_proj / down output (the shared expert's until the combine), Y = widest
  DeviceBuffer gu;      // f32 [R·top_k, 2I] gate/up outputs (unfused SwiGLU, reference experts)
  DeviceBuffer h;       // bf16 [R·top_k, I] SwiGLU output
  DeviceBuffer xp;      // bf16 [R, H] the routed experts' input, unit-permuted (wide grouped items)
  DeviceBuffer hs;      // bf16 [R, I] the shared expert's SwiGLU output (its own: it runs beside the routed)
  DeviceBuffer yd;      // f32 [R·top_k, H] expert down outputs per (row, choice)
  DeviceBuffer z;       // f32 [R, E padded] router logits
  DeviceBuffer eid, ew;         // int [R, k], f32 [R, k]: each row's experts (ascending id) and weights
  DeviceBuffer grp;             // int [3·(E+1) + R·k]: the step's pairs sorted by expert (grouped_moe)
  DeviceBuffer an;              // bf16 [L, H] final-norm rows for lm_head
  DeviceBuffer logits;          // f32 [L, V padded]
  DeviceBuffer partial;         // f32 attention splits [L·n_h, splits, d + 2]
  DeviceBuffer sample_scratch;  // f64 [L, V] scores, then w (kernels/sample.cu)
  DeviceBuffer sample_rows;     // SampleRowArgs [L]
  DeviceBuffer sample_out;      // SampleResult [L]
  DeviceBuffer sample_greedy;   // greedy rows' counters and chunk parts (kernels/sample_greedy.cu)
  DeviceBuffer sample_edits;    // SampleEdit [n], grown on demand
  int max_splits = 0;           // a full layer's splits a row at most (attn_splits.h)
  int64_t partial_slots = 0;    // (row, head, split) slots of `partial`
  int step_rows = 0;            // R: the rows of one step the buffers hold
  size_t bytes() const;
};

// What a Work is sized for (CudaBackend::init; the quantizer's teacher, teacher.h): R step rows, LR logit
// rows, A attention-slice rows; the widest input W, output Y, gate G, gate_up I2 and SwiGLU Ih of the
// matrices; K = top_k, H hidden, qkv rows, qw = n_h·d, max_d head_dim, E experts, lm_rows (padded) and vocab.
struct WorkSizes {
  size_t R = 0, LR = 0, A = 0, W = 0, Y = 0, G = 1, I2 = 1, Ih = 1, K = 1, H = 0, qkv = 0, qw = 0, max_d = 1,
         E = 1, lm_rows = 0, vocab = 0;
  int max_splits = 1;
};
// What the device layer ops serve of a spec (head_dim a multiple of 32 up to kMaxHeadDim; ≤ 1024 experts,
// top-k ≤ 32); `who` opens the error.
Status check_device_spec(const model::ModelSpec& s, const char* who);
// Allocates (and zeroes) every buffer of w for z; buffers a size makes empty get 16 bytes.
Status allocate_work(CudaBackend::Work& w, const WorkSizes& z);

}  // namespace gridq::cuda

// Internal to the CUDA backend: one step's rows and the step buffers (forward.cpp), shared by
// cuda_backend.cpp.
#pragma once

#include <vector>

#include "runtime/cuda/cuda_backend.h"

namespace gridq::cuda {

struct CudaBackend::Step {
  std::vector<int> ids, pos, slot;  // [T] token, absolute position, sequence slot
  std::vector<int> logit_rows;      // rows (< T) whose logits are wanted, ascending
  // forward_sampled: one plan per logit row (null: not sampled); the rows are sampled on the device and
  // only their tokens come back (sampling.cpp).
  bool sampled = false;
  std::vector<const runtime::SamplePlan*> plans;
  int T() const { return static_cast<int>(ids.size()); }
};

// Every activation buffer of a step, sized once from the spec for kMaxStepRows rows (shape per field).
struct CudaBackend::Work {
  DeviceBuffer rows;     // int [3][16]: ids, pos, seq_slot
  DeviceBuffer x;        // f32 [16, H] residual stream
  DeviceBuffer a;        // bf16 [16, H] normed input of a block
  DeviceBuffer a32;      // f32 [16, H] the same before rounding (the router's input)
  DeviceBuffer xin;      // bf16 [16, W] contract copy (FP4 QDQ) of a tiled GEMV's input, W = widest input
  DeviceBuffer xq, xs;   // u8 [16, W] FP8 codes, f32 [16] per-token scales
  DeviceBuffer qkv, g;   // f32 [16, qkv rows], [16, g rows] (padded rows)
  DeviceBuffer q, o;     // f32 [16, n_h·d]
  DeviceBuffer ob;       // bf16 [16, n_h·d] gated attention output
  DeviceBuffer y;        // f32 [16, Y] o_proj / down output, Y = widest padded output
  DeviceBuffer gu;       // f32 [16·top_k, 2I] gate/up outputs (unfused SwiGLU, reference experts)
  DeviceBuffer h;        // bf16 [16·top_k, I] SwiGLU output
  DeviceBuffer yd;       // f32 [16·top_k, H] reference experts' down outputs
  DeviceBuffer ys;       // f32 [16, H] shared expert output
  DeviceBuffer moe_out;  // bf16 / f32 [16, H] routed + shared
  DeviceBuffer z;        // f32 [16, E padded] router logits
  DeviceBuffer eid, ew, nsl;    // int [16, k], f32 [16, k], int [16] (= k): each row's experts and weights
  DeviceBuffer an;              // bf16 [16, H] final-norm rows for lm_head
  DeviceBuffer logits;          // f32 [16, V padded]
  DeviceBuffer partial;         // f32 attention splits [16·n_h, splits, d + 2]
  DeviceBuffer sample_scratch;  // f64 [16, V] scores, then w (kernels/sample.cu)
  DeviceBuffer sample_rows;     // SampleRowArgs [16]
  DeviceBuffer sample_out;      // SampleResult [16]
  DeviceBuffer sample_edits;    // SampleEdit [n], grown on demand
  int max_splits = 0;
  size_t bytes() const;
};

}  // namespace gridq::cuda

// The quantizer's teacher forward on the GPU (runtime::DeviceTeacher; quantizer.md §2 S2): one decoder layer
// of the BF16 source checkpoint resident at a time, run over the calibration sequences with the device
// engine's own layer ops (forward_ops.h), its captures handed to the streamer's hooks as host rows.
//
//   auto t = Teacher::create(spec);                      // streams, workspace; no weights yet
//   t->layer(l, lw, n_seq, S, x_host, &hooks);           // uploads layer l (dropping the previous one),
//                                                        // x [n_seq·S, H] += layer l, hooks fed
//
// Sequences run in steps of whole sequences (≤ kMaxStepRows rows), each a fresh causal context at
// position 0; a row's numbers do not depend on which other sequences share its step (gpu-engine.md §3), so
// the captures are those of one sequence at a time. The routed experts run grouped: a step's (row, choice)
// pairs gathered by expert in row order, one GEMM per expert (BF16 tiled, SwiGLU fused), then put back
// for the fixed-order combine. Numbers: the device engine's (BF16 activations into every matrix, BF16 KV,
// FP32 residual and router input); the captured rows are its FP32 norm outputs and its BF16 matrix inputs.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "runtime/cpu/layer_ops.h"
#include "runtime/cuda/device_model.h"
#include "runtime/cuda/forward.h"
#include "runtime/device.h"

namespace gridq::cuda {

// dst[i] = the FP32 value of BF16 bits src[i].
void widen_bf16(const uint16_t* src, size_t n, float* dst);

class Teacher final : public runtime::DeviceTeacher {
 public:
  static Expected<std::unique_ptr<Teacher>> create(const model::ModelSpec& spec);
  ~Teacher() override;
  Status layer(int l, const runtime::LayerWeights& lw, int64_t n_seq, int64_t S, float* x,
               const runtime::cpu::LayerHooks* hooks) override;
  int64_t peak_device_bytes() const override { return peak_; }
  Seconds take_seconds() override {
    const Seconds s = seconds_;
    seconds_ = {};
    return s;
  }

 private:
  Teacher() = default;
  // The call's rows for the hooks, in the call's row order (shapes per field; T = n_seq·S).
  struct Chunk {
    std::vector<float> a1, hm, a2;  // [T, H] attn_in; the residual mlp_in normalised; mlp_in
    std::vector<float> o;           // [T, n_h·d] o_proj input
    std::vector<float> u;           // [T, D or I_s] dense / shared-expert down input
    std::vector<float> out;         // [T, H] the layer's output
    std::vector<int> idx;           // [T, k] chosen experts, ascending id
    std::vector<float> wt;          // [T, k] their routing weights
    struct Expert {
      std::vector<int64_t> rows;  // ascending
      std::vector<float> wt;      // [n]
      std::vector<float> u;       // [n, I]
    };
    std::vector<Expert> ex;    // [E]
    std::vector<uint16_t> bf;  // download scratch
  };
  Status load_layer(int l, const runtime::LayerWeights& lw);
  Status size_for(int64_t S);  // step buffers and KV for sequences of S tokens
  // One step: sequences [s0, s0 + ns) of the call, rows [s0·S, (s0 + ns)·S) of x and of the chunk.
  Status step(int l, int64_t s0, int ns, int64_t S, const float* x, Chunk& ck);
  Status experts_step(int64_t r0, int T, Chunk& ck);  // teacher_moe.cpp
  void note_peak();

  model::ModelSpec spec_;
  cudaStream_t s_ = nullptr;
  WorkspaceBuffers ws_;
  std::unique_ptr<CudaBackend::Work> w_;
  int64_t sized_S_ = 0;  // the S the buffers below fit
  int seqs_per_step_ = 0;
  DeviceBuffer kv_, page_table_;
  int max_pages_ = 0;
  DeviceBuffer pairs_;    // int [2][R·k]: the gathered pairs' source rows, then their (row·k + choice)
  DeviceBuffer xg_, hg_;  // BF16 [R·k, H], [R·k, I]: the pairs' inputs and SwiGLU outputs, by expert
  DeviceBuffer yg_;       // FP32 [R·k, H]: their down outputs
  int layer_ = -1;
  DevLayer dl_;
  std::vector<DevSwiglu> experts_;  // [E] layer_'s routed experts, one SwiGLU block each
  size_t layer_bytes_ = 0;
  int64_t peak_ = 0;
  Seconds seconds_;
  Chunk ck_;  // the last call's host rows, reused (no 2 GB allocation per call at Laguna-S-2.1's width)
};

}  // namespace gridq::cuda

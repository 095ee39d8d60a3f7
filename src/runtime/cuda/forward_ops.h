// The forward's layer ops on the device (forward_layers.cpp), shared with the step driver (forward.cpp): the
// per-step context, and decoder_layer's pieces mirroring cpu/layer_ops.cpp (norm, attention, the SwiGLU MLP,
// the MoE block). Launches only.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/forward.h"
#include "runtime/cuda/kernels/forward_kernels.h"
#include "runtime/cuda/linear.h"

// A launcher's cudaError_t as the enclosing function's Status, naming the launch.
#define GQ_LAUNCH(expr, what) \
  GRIDQ_RETURN_IF_ERROR(::gridq::cuda::cuda_status((expr), what, __FILE__, __LINE__))

namespace gridq::cuda {

// Phase timing for `gridq bench decode`: an event at the end of each phase; the interval since the previous
// mark is charged to the phase's name. Off (no events) in normal use.
struct CudaBackend::PhaseTimer {
  bool on = false;
  cudaStream_t s = nullptr;
  std::vector<std::pair<const char*, cudaEvent_t>> marks;
  Status mark(const char* name) {
    if (!on) return {};
    cudaEvent_t e = nullptr;
    GRIDQ_CUDA(cudaEventCreate(&e));
    marks.emplace_back(name, e);
    GRIDQ_CUDA(cudaEventRecord(e, s));
    return {};
  }
  Status finish(std::map<std::string, double>& acc) {
    if (!on || marks.empty()) return {};
    GRIDQ_CUDA(cudaEventSynchronize(marks.back().second));
    for (size_t i = 1; i < marks.size(); ++i) {
      float ms = 0.0f;
      GRIDQ_CUDA(cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second));
      acc[marks[i].first] += ms;
    }
    for (auto& m : marks) (void)cudaEventDestroy(m.second);
    marks.clear();
    return {};
  }
};

namespace fwd {

struct Ctx {
  const model::ModelSpec& spec;
  CudaBackend::Work& w;
  const WorkspaceBuffers& ws;
  cudaStream_t s;
  int T;
  detail::RowInfo rows;
  const int* pos_host;  // [T] the rows' positions (host copy of rows.pos: attention's slices)
  CudaBackend::PhaseTimer* timer;
  int attn_warps;          // AttnArgs::tile_warps for the step
  cudaStream_t side;       // the side stream (g_proj beside attention, the shared expert beside the router),
  cudaEvent_t fork, join;  // forked at fork and joined at join
  const WorkspaceBuffers* side_ws;  // the split-K workspace of GEMVs on the side stream
  ContractCache cc;                 // whose contract copies xin / xq·xs hold (linear.h)
  // The L2 prefetch stream (forward_l2_ahead), forked from s at pf_fork and joined back at pf_join once per
  // layer; next: the following layer (its q/k/v are requested while this layer's MoE runs), or null.
  cudaStream_t pf = nullptr;
  cudaEvent_t pf_fork = nullptr, pf_join = nullptr;
  const DevLayer* next = nullptr;
  bool pf_open = false;
};

// Which contract copies of its input the first matrices of a block read: the norm before them writes those.
struct NormContracts {
  bool fp4 = false, fp8 = false;
};
NormContracts attention_contracts(const DevLayer& dl);
NormContracts mlp_contracts(const DevLayer& dl, bool moe, bool shared);

// Attention warps per CTA (AttnArgs::tile_warps): 8 when the step holds a run of ≥ 32 positions of one
// sequence (a prefill chunk), else 4.
int attention_warps(const std::vector<int>& pos, const std::vector<int>& slot);

// c.w.a = RMSNorm(c.w.x) (and FP32 into a32 when given), with the contract copies the block needs.
Status norm(Ctx& c, const float* weight, const NormContracts& n, float* a32);
// y = L(x) for the step's rows.
Status linear(Ctx& c, const DevLinear& L, const uint16_t* x, float* y);
// c.w.y [T, down.out_rows] = SwiGLU MLP of a (the dense MLP or the shared expert; rows beyond H padding),
// through h [T, I]; with res non-null, res [T, H] += the MLP instead (the dense layer's residual add).
Status swiglu_mlp(Ctx& c, const DevSwiglu& m, const uint16_t* a, uint16_t* h, float* res);
// c.w.x += the attention block of the normed rows c.w.a: attention_gated, then o_proj's residual add.
Status attention(Ctx& c, const DevLayer& dl, const model::LayerSpec& L, const detail::KvView& kv);
// c.w.ob [T, n_h·d] BF16 = the gated attention of the normed rows c.w.a (o_proj's input; its FP8 codes in
// xq / xs when o_proj reads them).
Status attention_gated(Ctx& c, const DevLayer& dl, const model::LayerSpec& L, const detail::KvView& kv);
// Helpers of the layer ops (forward_layers.cpp) that the MoE block (forward_moe.cpp) uses too.
// A kernel rewrote rows p: a contract copy made from them is stale.
void rewrote(Ctx& c, const void* p);
// The FP4 QDQ copy of a [T, cols] in xin, made unless a norm or an earlier matrix already made it.
Status fp4_copy(Ctx& c, const uint16_t* a, int cols);
// Whether applying L writes the contract scratch (xin or xq/xs).
bool uses_scratch(const DevLinear& L);
// Whether the step asks the weights of `what` (kL2Ahead*) into L2 ahead: not while phases are timed (each
// phase would then pay for the next one's bytes).
bool l2_on(const Ctx& c, int what);
// The prefetch stream, forked at this point of the main stream (what it runs next may read what the main
// stream wrote so far: the router's choices).
Status l2_fork(Ctx& c);
// Requests L's tiles into L2 from the prefetch stream (forked by the caller).
Status l2_ahead(Ctx& c, const DevLinear& L);
// Rejoins the L2 prefetch stream to the main stream if this layer forked it (forward_l2_ahead).
Status l2_join(Ctx& c);
// c.w.eid / c.w.ew [T, top_k] = the router's choices for the FP32 normed rows c.w.a32 (ascending expert id)
// and their weights.
Status route(Ctx& c, const DevLayer& dl);
// c.w.x += the MoE block (shared expert, router, routed experts) of the normed rows c.w.a.
Status moe(Ctx& c, const DevLayer& dl);

}  // namespace fwd
}  // namespace gridq::cuda

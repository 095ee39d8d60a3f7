// One forward step of ≤ kMaxStepRows rows on the device: the embedding, every decoder layer (forward_ops.h),
// the final norm and lm_head; decode steps replay a captured CUDA graph.
#include "runtime/cuda/forward.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/forward_ops.h"

namespace gridq::cuda {
namespace {

using fwd::Ctx;

// The kernel nodes of a captured graph (what a replay launches); 0 if the graph cannot be read.
int kernel_nodes(cudaGraph_t g) {
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess || n == 0) return 0;
  std::vector<cudaGraphNode_t> nodes(n);
  if (cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return 0;
  int k = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t{};
    if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) ++k;
  }
  return k;
}

}  // namespace

Status CudaBackend::run_step(const Step& st, std::vector<float>* logits,
                             std::vector<runtime::SampledToken>* sampled) {
  const int T = st.T(), V = spec_.vocab_size;
  Work& w = *work_;
  // w.rows = [ids | pos | slot | kv_write], T ints each (the layout depends on T alone, as a decode graph's
  // pointers do: one graph per T).
  std::vector<int> host(4 * static_cast<size_t>(T), 0);
  for (int t = 0; t < T; ++t) {
    host[t] = st.ids[t], host[T + t] = st.pos[t], host[2 * T + t] = st.slot[t];
    host[3 * T + t] = st.kv_write.empty() ? 1 : st.kv_write[static_cast<size_t>(t)];
  }
  GRIDQ_CUDA(cudaMemcpyAsync(w.rows.as(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream_));
  // A decode step (every row wants its logits) of T rows always launches the same kernels with the same
  // arguments (the step's ids, positions and slots are read from w.rows on the device), so from its second
  // occurrence it replays a captured CUDA graph: ~1 µs per node instead of ~5 µs per launch (hopper.md §1).
  // The first occurrence runs eagerly, so one-time kernel setup never happens inside a capture.
  bool decode = graphs_on_ && !timing_ && static_cast<int>(st.logit_rows.size()) == T;
  for (int t = 0; decode && t < T; ++t) decode = st.logit_rows[static_cast<size_t>(t)] == t;
  PhaseTimer timer;
  timer.on = timing_;
  timer.s = stream_;
  if (decode && graph_seen_[T]++ > 0) {
    if (!graphs_[T]) {
      GRIDQ_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      Status st_enq = enqueue_step(st, timer);
      cudaGraph_t g = nullptr;
      const cudaError_t ce = cudaStreamEndCapture(stream_, &g);
      if (!st_enq.ok()) {
        if (g) (void)cudaGraphDestroy(g);
        return st_enq;
      }
      GRIDQ_CUDA(ce);
      graph_kernels_[T] = kernel_nodes(g);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
      (void)cudaGraphDestroy(g);
      GRIDQ_CUDA(ie);
      graphs_[T] = exec;
    }
    GRIDQ_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graphs_[T]), stream_));
  } else {
    GRIDQ_RETURN_IF_ERROR(enqueue_step(st, timer));
  }
  if (st.logit_rows.empty()) {
    GRIDQ_CUDA(cudaStreamSynchronize(stream_));
    return timer.finish(phase_ms_);
  }
  if (st.sampled) {
    GRIDQ_RETURN_IF_ERROR(sample_step(st, *sampled));
    GRIDQ_RETURN_IF_ERROR(timer.mark("final norm+lm_head+sampling"));
    return timer.finish(phase_ms_);
  }
  const int R = static_cast<int>(st.logit_rows.size());
  const size_t base = logits->size();
  logits->resize(base + static_cast<size_t>(R) * V);
  GRIDQ_CUDA(cudaMemcpy2DAsync(logits->data() + base, static_cast<size_t>(V) * 4, w.logits.as(),
                               static_cast<size_t>(dm_->lm_head.out_rows()) * 4, static_cast<size_t>(V) * 4,
                               R, cudaMemcpyDeviceToHost, stream_));
  GRIDQ_CUDA(cudaStreamSynchronize(stream_));
  GRIDQ_RETURN_IF_ERROR(timer.mark("final norm+lm_head+logits"));
  return timer.finish(phase_ms_);
}

// Every kernel of one step, from the embedding to the lm_head GEMV (no host copies, no synchronization: the
// same sequence is captured into the decode graphs).
Status CudaBackend::enqueue_step(const Step& st, PhaseTimer& timer) {
  const int T = st.T(), H = spec_.hidden_size;
  Work& w = *work_;
  Ctx c{spec_,
        w,
        ws_,
        stream_,
        T,
        {w.rows.as<int>() + T, w.rows.as<int>() + 2 * T, w.rows.as<int>() + 3 * T},
        st.pos.data(),
        &timer,
        fwd::attention_warps(st.pos, st.slot),
        side_,
        fork_,
        join_,
        &ws_side_,
        {}};
  c.pf = pf_, c.pf_fork = pf_fork_, c.pf_join = pf_join_;
  GRIDQ_RETURN_IF_ERROR(timer.mark("start"));
  GQ_LAUNCH(detail::raw_embed(dm_->embed.as<uint16_t>(), w.rows.as<int>(), T, H, w.x.as<float>(), stream_),
            "embed");
  GRIDQ_RETURN_IF_ERROR(timer.mark("embed"));
  for (int l = 0; l < spec_.n_layers; ++l) {
    const auto& L = spec_.layers[static_cast<size_t>(l)];
    const DevLayer& dl = dm_->layers[static_cast<size_t>(l)];
    detail::KvView kv;
    kv.kvw = L.n_kv_heads * L.head_dim;
    const int fi = plan_.full_index[static_cast<size_t>(l)], ri = plan_.ring_index[static_cast<size_t>(l)];
    if (fi >= 0) {
      kv.base = pages_.as<uint16_t>();
      kv.k_off = plan_.page_offset[static_cast<size_t>(fi)] / 2;
      kv.v_off = kv.k_off + static_cast<long long>(plan_.page_tokens) * kv.kvw;
      kv.page_elems = plan_.page_bytes / 2;
      kv.page_tokens = plan_.page_tokens;
      kv.page_table = page_table_.as<int>();
      kv.max_pages = max_pages_per_seq_;
    } else {
      kv.base = rings_.as<uint16_t>();
      kv.k_off = plan_.ring_offset[static_cast<size_t>(ri)] / 2;
      kv.v_off = kv.k_off + static_cast<long long>(plan_.ring_slots[static_cast<size_t>(ri)]) * kv.kvw;
      kv.page_elems = plan_.ring_bytes_per_seq / 2;
      kv.page_tokens = plan_.ring_slots[static_cast<size_t>(ri)];
      kv.sliding = 1;
    }
    c.next = l + 1 < spec_.n_layers ? &dm_->layers[static_cast<size_t>(l + 1)] : nullptr;
    GRIDQ_RETURN_IF_ERROR(fwd::norm(c, dl.input_norm, fwd::attention_contracts(dl), nullptr));
    GRIDQ_RETURN_IF_ERROR(fwd::attention(c, dl, L, kv));
    const bool is_moe = L.mlp == model::MlpKind::kMoe;
    GRIDQ_RETURN_IF_ERROR(fwd::norm(c, dl.post_norm,
                                    fwd::mlp_contracts(dl, is_moe, spec_.moe.shared_intermediate > 0),
                                    is_moe ? w.a32.as<float>() : nullptr));
    if (L.mlp == model::MlpKind::kDense) {
      GRIDQ_RETURN_IF_ERROR(
          fwd::swiglu_mlp(c, dl.mlp, w.a.as<uint16_t>(), w.h.as<uint16_t>(), w.x.as<float>()));
      GRIDQ_RETURN_IF_ERROR(timer.mark("dense mlp"));
    } else
      GRIDQ_RETURN_IF_ERROR(fwd::moe(c, dl));
    GRIDQ_RETURN_IF_ERROR(fwd::l2_join(c));  // a dense layer's prefetches (the MoE joins before its combine)
  }
  if (st.logit_rows.empty()) return {};
  const int R = static_cast<int>(st.logit_rows.size());
  // The requested rows, normed, packed to the front of `an` (one launch when they are rows 0..R-1, as in
  // every decode step).
  bool leading = true;
  for (int i = 0; i < R; ++i) leading = leading && st.logit_rows[static_cast<size_t>(i)] == i;
  if (leading)
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>(), dm_->final_norm.as<float>(), R, H, spec_.norm_eps,
                                      w.an.as<uint16_t>(), nullptr, stream_),
              "final norm");
  for (int i = 0; !leading && i < R; ++i)
    GQ_LAUNCH(detail::raw_rmsnorm_f32(w.x.as<float>() + static_cast<long long>(st.logit_rows[i]) * H,
                                      dm_->final_norm.as<float>(), 1, H, spec_.norm_eps,
                                      w.an.as<uint16_t>() + static_cast<long long>(i) * H, nullptr, stream_),
              "final norm");
  Ctx lc = c;
  lc.T = R;
  return fwd::linear(lc, dm_->lm_head, w.an.as<uint16_t>(), w.logits.as<float>());
}

}  // namespace gridq::cuda

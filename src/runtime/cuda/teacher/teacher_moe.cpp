// The teacher's routed experts for one step (teacher.h): the step's (row, choice) pairs grouped by expert,
// rows ascending within an expert (the order the hooks and cpu::mlp use), one SwiGLU GEMM pair per expert
// over its gathered rows, the down outputs put back at row·k + choice for raw_moe_combine's fixed order.
#include <algorithm>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/forward_ops.h"
#include "runtime/cuda/teacher/teacher.h"
#include "runtime/cuda/teacher/teacher_kernels.h"

namespace gridq::cuda {

Status Teacher::experts_step(int64_t r0, int T, Chunk& ck) {
  const auto& M = spec_.moe;
  const int E = M.n_experts, K = M.top_k, H = spec_.hidden_size, I = M.expert_intermediate;
  const int P = T * K;
  CudaBackend::Work& w = *w_;
  const int* idx = ck.idx.data() + r0 * K;
  const float* wt = ck.wt.data() + r0 * K;
  // pairs [2][P]: the source row of each grouped pair, then where its down output goes (row·k + choice).
  std::vector<int> off(static_cast<size_t>(E) + 1, 0), pairs(2 * static_cast<size_t>(P));
  for (int p = 0; p < P; ++p) {
    if (idx[p] < 0 || idx[p] >= E)
      return err("cuda teacher: row {} chose expert {} outside [0, {})", r0 + p / K, idx[p], E);
    ++off[static_cast<size_t>(idx[p]) + 1];
  }
  for (int e = 0; e < E; ++e) off[e + 1] += off[e];
  std::vector<int> fill(off.begin(), off.end() - 1);
  for (int p = 0; p < P; ++p) {
    const int g = fill[static_cast<size_t>(idx[p])]++;
    pairs[static_cast<size_t>(g)] = p / K;
    pairs[static_cast<size_t>(P + g)] = p;
  }
  GRIDQ_CUDA(cudaMemcpyAsync(pairs_.as(), pairs.data(), pairs.size() * 4, cudaMemcpyHostToDevice, s_));
  const int* src = pairs_.as<int>();
  const int* dst = src + P;
  GQ_LAUNCH(detail::raw_gather_rows_bf16(w.a.as<uint16_t>(), src, P, H, xg_.as<uint16_t>(), s_),
            "teacher expert gather");
  const long long ld_y = experts_.front().down.out_rows();  // every expert's (checked below)
  for (int e = 0; e < E; ++e) {
    const int n = off[e + 1] - off[e];
    if (n == 0) continue;
    const DevSwiglu& m = experts_[static_cast<size_t>(e)];
    const uint16_t* xe = xg_.as<uint16_t>() + static_cast<long long>(off[e]) * H;
    uint16_t* he = hg_.as<uint16_t>() + static_cast<long long>(off[e]) * I;
    float* ye = yg_.as<float>() + static_cast<long long>(off[e]) * ld_y;
    if (m.down.out_rows() != ld_y)
      return err("cuda teacher: expert {} down_proj writes rows of {}, not {}", e, m.down.out_rows(), ld_y);
    if (m.fused) {
      GRIDQ_RETURN_IF_ERROR(gemv_swiglu(m.gate_up.tiled.m, n, xe, he, false, ws_.ws, s_, false));
    } else {
      GRIDQ_RETURN_IF_ERROR(apply_linear(m.gate_up, xe, n, w.gu.as<float>(), {}, ws_.ws, s_));
      GQ_LAUNCH(detail::raw_swiglu(w.gu.as<float>(), m.gate_up.out_rows(), I, n, I, he, s_),
                "teacher swiglu");
    }
    GRIDQ_RETURN_IF_ERROR(apply_linear(m.down, he, n, ye, {}, ws_.ws, s_));
  }
  GQ_LAUNCH(detail::raw_scatter_rows_f32(yg_.as<float>(), ld_y, dst, P, H, w.yd.as<float>(), s_),
            "teacher expert scatter");
  // The captures: each pair's SwiGLU output, appended to its expert in row order (steps arrive in order).
  ck.bf.resize(static_cast<size_t>(P) * I);
  GRIDQ_CUDA(cudaMemcpyAsync(ck.bf.data(), hg_.as(), ck.bf.size() * 2, cudaMemcpyDeviceToHost, s_));
  GRIDQ_CUDA(cudaStreamSynchronize(s_));
  for (int e = 0; e < E; ++e) {
    auto& ex = ck.ex[static_cast<size_t>(e)];
    const int n = off[e + 1] - off[e];
    const size_t u0 = ex.u.size();
    ex.u.resize(u0 + static_cast<size_t>(n) * I);
    for (int i = 0; i < n; ++i) {
      const int g = off[e] + i, p = pairs[static_cast<size_t>(P + g)];
      ex.rows.push_back(r0 + p / K);
      ex.wt.push_back(wt[p]);
      widen_bf16(ck.bf.data() + static_cast<size_t>(g) * I, static_cast<size_t>(I),
                 ex.u.data() + u0 + static_cast<size_t>(i) * I);
    }
  }
  return {};
}

}  // namespace gridq::cuda

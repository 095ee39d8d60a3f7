// The MLP halves of a decoder layer (layer_ops.h, laguna.md §1.4): dense SwiGLU, and MoE = router, the
// routed experts and the shared expert. A step's experts run together: the gate/up products of every
// routed expert and of the shared expert are one parallel op, their down products another, so a decoded
// token wakes the pool twice per MoE layer, not three times per expert. Sums keep the reference order
// (experts ascending per output element).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/matmul.h"
#include "runtime/cpu/mlp_ops.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/router.h"

namespace gridq::runtime::cpu {

namespace {

inline float silu(float z) { return z / (1.0f + std::exp(-z)); }

// hg[i] = silu(hg[i]) · hu[i] for i < n, over the pool when n is large (prefill). `fast`: the layer runs on
// the bf16 path (its matrices' cpu_bf16_dot), which takes a vectorised exp.
void silu_mul(float* hg, const float* hu, int64_t n, bool fast) {
  if (fast) return silu_mul_fast(hg, hu, n);
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hg[i] = silu(hg[i]) * hu[i];
  };
  if (n >= 8192)
    parallel_for((n + 1023) / 1024, [&](int64_t b, int64_t e) { body(b * 1024, std::min(n, e * 1024)); });
  else
    body(0, n);
}

}  // namespace

void swiglu(const QMatrix& g, const QMatrix& u, const QMatrix& d, const float* a, int64_t T, float* out,
            float* hg, float* hu) {
  const int64_t I = g.rows;
  const MatJob up[2] = {{&g, a, T, hg}, {&u, a, T, hu}};
  matmul_jobs(up);
  silu_mul(hg, hu, T * I, g.cpu_bf16_dot);
  matmul(d, hg, T, out);
}

void moe(const model::ModelSpec& spec, const LayerWeights& lw, int64_t T, const float* a, float* out,
         const LayerHooks* hooks) {
  const auto& M = spec.moe;
  const int64_t H = spec.hidden_size, E = M.n_experts, K = M.top_k, I = M.expert_intermediate;
  const int64_t Is = M.shared_intermediate;
  Scratch zs(Slot::kRouter, static_cast<size_t>(T * E));  // [T, E] router logits, fp32
  matmul(lw.router, a, T, zs.data());
  // Per calling thread, reused; named references so that the pool's tasks see the caller's instances.
  thread_local std::vector<int> t_idx;
  thread_local std::vector<float> t_wt, t_ws;
  thread_local std::vector<int64_t> t_first, t_rows, t_slot_of;
  thread_local std::vector<const float*> t_xe;
  thread_local std::vector<MatJob> t_jobs;
  auto& idx = t_idx;
  auto& wt = t_wt;
  auto& ws = t_ws;
  auto& first = t_first;
  auto& rows = t_rows;
  auto& slot_of = t_slot_of;
  auto& xe = t_xe;
  auto& jobs = t_jobs;
  idx.resize(static_cast<size_t>(T * K));
  wt.resize(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t)
    route_token(zs.data() + t * E, static_cast<int>(E),
                lw.router_bias.empty() ? nullptr : lw.router_bias.data(), static_cast<int>(K), M.score,
                M.renormalize, idx.data() + t * K, wt.data() + t * K);
  if (hooks && hooks->routing) hooks->routing(idx.data(), wt.data(), T);
  // Group tokens per expert (ascending token index) so each expert's weights are read once per forward:
  // expert e's rows are slots [first[e], first[e + 1]) of rows/ws; slot_of[t·K + j] is (t, j)'s slot.
  first.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < T * K; ++i) ++first[static_cast<size_t>(idx[static_cast<size_t>(i)]) + 1];
  for (int64_t e = 0; e < E; ++e) first[static_cast<size_t>(e + 1)] += first[static_cast<size_t>(e)];
  const int64_t N = T * K;  // routed rows in all
  rows.resize(static_cast<size_t>(N));
  ws.resize(static_cast<size_t>(N));
  slot_of.resize(static_cast<size_t>(N));
  {
    thread_local std::vector<int64_t> fill;
    fill.assign(first.begin(), first.end() - 1);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t s = fill[static_cast<size_t>(idx[static_cast<size_t>(i)])]++;
      rows[static_cast<size_t>(s)] = i / K;
      ws[static_cast<size_t>(s)] = wt[static_cast<size_t>(i)];
      slot_of[static_cast<size_t>(i)] = s;
    }
  }
  // Each token's slots, ascending (= its experts in ascending order: the reference's summation order).
  thread_local std::vector<int64_t> t_sorted;
  auto& sorted = t_sorted;
  sorted.assign(slot_of.begin(), slot_of.end());
  for (int64_t t = 0; t < T; ++t) std::sort(sorted.begin() + t * K, sorted.begin() + (t + 1) * K);
  Scratch routeds(Slot::kRouted, static_cast<size_t>(T * H));  // [T, H] Σ over experts so far of y·weight
  float* routed = routeds.data();
  std::fill(routed, routed + T * H, 0.0f);
  // Experts in ascending groups of at most kGroupRows routed rows: one group at decode and for prompts up
  // to 1k tokens (two parallel ops for all experts); a quantizer chunk of 8k tokens holds one group's
  // inputs and outputs at a time, not [4·8k, H] of each. The shared expert runs with the last group.
  constexpr int64_t kGroupRows = 4096;
  for (int64_t e0 = 0; e0 < E;) {
    int64_t e1 = e0 + 1;
    while (e1 < E && first[static_cast<size_t>(e1 + 1)] - first[static_cast<size_t>(e0)] <= kGroupRows) ++e1;
    const int64_t g0 = first[static_cast<size_t>(e0)], Ng = first[static_cast<size_t>(e1)] - g0;
    const int64_t Ts = e1 == E && Is > 0 ? T : 0;  // shared-expert rows in this group
    // xe [Ng, H] gathered inputs, ye [Ng, H] outputs, hg/hu [Ng·I + Ts·Is] (the shared rows after).
    Scratch xes(Slot::kXe, static_cast<size_t>(Ng * H)), yes(Slot::kYe, static_cast<size_t>(Ng * H));
    Scratch hgs(Slot::kGate, static_cast<size_t>(Ng * I + Ts * Is)),
        hus(Slot::kUp, static_cast<size_t>(Ng * I + Ts * Is));
    float *hg = hgs.data(), *hu = hus.data(), *ye = yes.data();
    float* shg = hg + Ng * I;
    float* shu = hu + Ng * I;
    xe.assign(static_cast<size_t>(E), nullptr);
    jobs.clear();
    // Gathered inputs: slot s's row copied to xes[s - g0], over the pool for a prompt (a copy of T·K rows).
    // A single row is read in place instead (at decode every expert then shares one quantized copy of it).
    bool gather = false;
    for (int64_t e = e0; e < e1; ++e)
      gather = gather || first[static_cast<size_t>(e + 1)] - first[static_cast<size_t>(e)] > 1;
    if (gather) {
      auto copy = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          std::memcpy(xes.data() + i * H, a + rows[static_cast<size_t>(g0 + i)] * H,
                      static_cast<size_t>(H) * sizeof(float));
      };
      if (Ng * H >= (int64_t{1} << 16))
        parallel_for(Ng, copy);
      else
        copy(0, Ng);
    }
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t s0 = first[static_cast<size_t>(e)], n = first[static_cast<size_t>(e + 1)] - s0,
                    l0 = s0 - g0;
      if (n == 0) continue;
      xe[static_cast<size_t>(e)] = n == 1 ? a + rows[static_cast<size_t>(s0)] * H : xes.data() + l0 * H;
      jobs.push_back({&lw.expert_gate[static_cast<size_t>(e)], xe[static_cast<size_t>(e)], n, hg + l0 * I});
      jobs.push_back({&lw.expert_up[static_cast<size_t>(e)], xe[static_cast<size_t>(e)], n, hu + l0 * I});
    }
    if (Ts > 0) {
      jobs.push_back({&lw.shared_gate, a, T, shg});
      jobs.push_back({&lw.shared_up, a, T, shu});
    }
    matmul_jobs(jobs);
    silu_mul(hg, hu, Ng * I + Ts * Is, !jobs.empty() && jobs.front().w->cpu_bf16_dot);
    jobs.clear();
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t s0 = first[static_cast<size_t>(e)], n = first[static_cast<size_t>(e + 1)] - s0,
                    l0 = s0 - g0;
      if (n == 0) continue;
      if (hooks && hooks->expert)
        hooks->expert(static_cast<int>(e), std::span<const int64_t>(rows.data() + s0, static_cast<size_t>(n)),
                      std::span<const float>(ws.data() + s0, static_cast<size_t>(n)),
                      xe[static_cast<size_t>(e)], hg + l0 * I);
      jobs.push_back({&lw.expert_down[static_cast<size_t>(e)], hg + l0 * I, n, ye + l0 * H});
    }
    if (Ts > 0) {
      if (hooks && hooks->shared_down_in) hooks->shared_down_in(shg, T);
      jobs.push_back({&lw.shared_down, shg, T, out});
    }
    matmul_jobs(jobs);
    // routed[t] += y·weight over t's slots in this group, ascending.
    const int64_t s_end = g0 + Ng;
    auto accumulate = [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        float* r = routed + t * H;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t s = sorted[static_cast<size_t>(t * K + j)];
          if (s < g0 || s >= s_end) continue;
          const float w = ws[static_cast<size_t>(s)];
          const float* y = ye + (s - g0) * H;
          for (int64_t c = 0; c < H; ++c) r[c] += y[c] * w;
        }
      }
    };
    if (T >= 16)
      parallel_for(T, accumulate);
    else
      accumulate(0, T);
    e0 = e1;
  }
  // out[t] = routed[t]·scale (+ shared[t]).
  auto finish = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* r = routed + t * H;
      float* o = out + t * H;
      if (Is > 0)
        for (int64_t c = 0; c < H; ++c) o[c] = r[c] * M.routed_scaling + o[c];
      else
        for (int64_t c = 0; c < H; ++c) o[c] = M.routed_scaling == 1.0f ? r[c] : r[c] * M.routed_scaling;
    }
  };
  if (T >= 16)
    parallel_for(T, finish);
  else
    finish(0, T);
}

}  // namespace gridq::runtime::cpu

// The rounding floor of the CPU reference (rounding_floor_test.cpp, and the GPU parity bounds of
// tests/cuda/test_engine.cpp): the CPU forward of one sequence twice, (a) as CpuBackend::forward computes it
// and (b) with the residual stream rounded to BF16 after every decoder layer and K/V kept in a BF16 cache
// (attention's fast arithmetic: scores and value sums fused, vectorised exp) — the size of perturbation any
// BF16-activation engine with a BF16 KV cache (the GPU's, vLLM's default) introduces. KL(a‖b) is the floor
// below which no such engine can be judged.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "parity_util.h"
#include "runtime/cpu/layer_ops.h"
#include "runtime/cpu/matmul.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {

// The CPU forward of one sequence from position 0, all tokens in one call, logits [n, V] of every row, as
// CpuBackend::forward computes them. With round_bf16, x is rounded to BF16 after every decoder layer and the
// KV cache holds BF16.
inline std::vector<float> forward_all(const model::ModelSpec& spec, const ModelWeights& w,
                                      const std::vector<int32_t>& tokens, bool round_bf16) {
  const int64_t H = spec.hidden_size;
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<cpu::LayerCache> caches;
  caches.reserve(static_cast<size_t>(spec.n_layers));
  for (const auto& L : spec.layers) caches.push_back(cpu::fresh_layer_cache(L, round_bf16));
  cpu::AttnLayout lay;
  lay.seqs.push_back(cpu::AttnSeq{nullptr, 0, 0, T});
  for (int64_t j = 0; j < T; ++j) {
    lay.pos.push_back(j);
    lay.seq_of.push_back(0);
  }
  std::vector<float> x(static_cast<size_t>(T * H));  // [T, H] residual stream
  for (int64_t t = 0; t < T; ++t) dequantize_row(w.embed, tokens[static_cast<size_t>(t)], x.data() + t * H);
  cpu::LineVector<float> a;
  for (int l = 0; l < spec.n_layers; ++l) {
    lay.seqs[0].cache = &caches[static_cast<size_t>(l)];
    cpu::decoder_layer(spec, w.layers[static_cast<size_t>(l)], l, lay, x.data(), a);
    if (round_bf16)
      for (float& v : x) v = bf16_round(v);
  }
  std::vector<float> h(static_cast<size_t>(T * H));
  for (int64_t r = 0; r < T; ++r)
    cpu::rmsnorm_rows(x.data() + r * H, w.final_norm.data(), 1, H, spec.norm_eps, h.data() + r * H);
  std::vector<float> logits(static_cast<size_t>(T * spec.vocab_size));
  cpu::matmul(w.lm_head, h.data(), T, logits.data());
  return logits;
}

struct Floor {
  testing::Compare c;
  double top1 = 0.0;
};

// Mean KL(exact ‖ bf16-rounded) and top-1 agreement over all rows of `seqs`; prints the report line.
inline Floor measure(const std::string& name, const model::ModelSpec& spec, const ModelWeights& w,
                     const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<float> ref, got;
  int64_t rows = 0;
  for (const auto& s : seqs) {
    auto a = forward_all(spec, w, s, false);
    auto b = forward_all(spec, w, s, true);
    ref.insert(ref.end(), a.begin(), a.end());
    got.insert(got.end(), b.begin(), b.end());
    rows += static_cast<int64_t>(s.size());
  }
  Floor f;
  f.c = testing::compare_logits(ref.data(), got.data(), rows, spec.vocab_size);
  f.top1 = rows ? static_cast<double>(rows - f.c.argmax_mismatch) / static_cast<double>(rows) : 0.0;
  std::printf("[rounding floor] %s rows %lld mean KL %.3e top-1 %.4f max|dlogit| %.3g\n", name.c_str(),
              static_cast<long long>(rows), f.c.mean_kl, f.top1, f.c.max_abs);
  std::fflush(stdout);
  return f;
}

}  // namespace gridq::runtime

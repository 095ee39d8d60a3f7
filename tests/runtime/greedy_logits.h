// Every logit of a prompt's prefill (in the engine's chunks) followed by greedy decode steps, in order: what
// the invariance tests compare across thread counts, prefill chunks and kernels.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace gridq::testing {

inline std::vector<float> prefill_then_greedy(runtime::Engine& e, std::span<const int32_t> ids, int steps) {
  runtime::SeqId s = e.create_sequence();
  auto lg = e.prefill(s, ids, runtime::LogitsMode::kAll);
  EXPECT_TRUE(lg.ok()) << lg.message();
  if (!lg.ok()) return {};
  std::vector<float> all = *lg;
  std::vector<float> last(all.end() - e.vocab_size(), all.end());
  for (int step = 0; step < steps; ++step) {
    runtime::SeqId seqs[1] = {s};
    int32_t tk[1] = {runtime::argmax(last)};
    auto d = e.decode(seqs, tk);
    EXPECT_TRUE(d.ok()) << d.message();
    if (!d.ok()) break;
    last = *d;
    all.insert(all.end(), last.begin(), last.end());
  }
  e.free_sequence(s);
  return all;
}

}  // namespace gridq::testing

// Perplexity over consecutive, non-overlapping windows of a token stream (each window a fresh sequence,
// no BOS, as the model was trained). Each window's logits are also handed to optional sinks, so other
// metrics over the same forward passes (KL against a teacher, top-1 agreement) plug in without a second
// pass: see WindowSink.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "runtime/engine.h"

namespace gridq::eval {

struct PerplexityOptions {
  int64_t max_tokens = 0;  // 0: all tokens
  int window = 512;        // tokens per window; a trailing window shorter than 2 tokens is dropped
  int batch = 1;           // windows per forward (logits memory: batch·window·vocab floats)
  // Called after each forward with the windows scored so far and their total (gridq eval's progress line).
  std::function<void(int64_t done, int64_t total)> on_progress;
};

struct PerplexityResult {
  double ppl = 0.0;
  double mean_nll = 0.0;  // nats per predicted position
  int64_t positions = 0;  // predicted positions: sum over windows of (len - 1)
  int64_t windows = 0;
  int64_t tokens = 0;
  double seconds = 0.0;
};

// Called once per window with its tokens and logits [window.size(), vocab].
using WindowSink = std::function<Status(int64_t window_index, std::span<const int32_t> window,
                                        const float* logits, int64_t vocab)>;

// The windows perplexity() scores: the first max_tokens tokens (0: all) cut into consecutive runs of
// `window`; a trailing run shorter than 2 tokens is dropped. Spans point into `tokens`.
std::vector<std::span<const int32_t>> split_windows(std::span<const int32_t> tokens, int64_t max_tokens,
                                                    int window);

// Negative log-likelihood of `target` under softmax(logits[0..vocab)), in float64.
double token_nll(const float* logits, int64_t vocab, int32_t target);

Expected<PerplexityResult> perplexity(runtime::Engine& engine, std::span<const int32_t> tokens,
                                      const PerplexityOptions& opts, const WindowSink& sink = {});

}  // namespace gridq::eval

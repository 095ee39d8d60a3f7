#include "eval/perplexity.h"

#include <chrono>
#include <cmath>

namespace gridq::eval {

std::vector<std::span<const int32_t>> split_windows(std::span<const int32_t> tokens, int64_t max_tokens,
                                                    int window) {
  std::vector<std::span<const int32_t>> windows;
  if (window < 2) return windows;
  if (max_tokens > 0 && static_cast<int64_t>(tokens.size()) > max_tokens)
    tokens = tokens.subspan(0, static_cast<size_t>(max_tokens));
  for (size_t s = 0; s < tokens.size(); s += static_cast<size_t>(window)) {
    auto w = tokens.subspan(s, std::min(static_cast<size_t>(window), tokens.size() - s));
    if (w.size() >= 2) windows.push_back(w);
  }
  return windows;
}

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  double mx = logits[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  double z = 0.0;
  for (int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(logits[v]) - mx);
  return std::log(z) + mx - static_cast<double>(logits[target]);
}

Expected<PerplexityResult> perplexity(runtime::Engine& engine, std::span<const int32_t> tokens,
                                      const PerplexityOptions& opts, const WindowSink& sink) {
  if (opts.window < 2) return err("perplexity: window must be >= 2 (got {})", opts.window);
  if (opts.batch < 1) return err("perplexity: batch must be >= 1 (got {})", opts.batch);
  const auto windows = split_windows(tokens, opts.max_tokens, opts.window);
  if (windows.empty()) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    return err("perplexity: need at least 2 tokens (got {})",
               opts.max_tokens > 0 ? std::min(n, opts.max_tokens) : n);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = engine.vocab_size();
  PerplexityResult r;
  double nll = 0.0;
  for (size_t b = 0; b < windows.size(); b += static_cast<size_t>(opts.batch)) {
    const size_t nb = std::min(static_cast<size_t>(opts.batch), windows.size() - b);
    std::vector<runtime::SeqId> ids;
    std::vector<runtime::BatchItem> items;
    for (size_t i = 0; i < nb; ++i) {
      ids.push_back(engine.create_sequence());
      items.push_back(runtime::BatchItem{ids.back(), windows[b + i], runtime::LogitsMode::kAll});
    }
    auto lg = engine.forward(items);
    for (auto id : ids) engine.free_sequence(id);
    if (!lg.ok()) return lg.error();
    const float* p = lg->data();
    for (size_t i = 0; i < nb; ++i) {
      const auto& w = windows[b + i];
      for (size_t j = 0; j + 1 < w.size(); ++j) nll += token_nll(p + j * V, V, w[j + 1]);
      r.positions += static_cast<int64_t>(w.size()) - 1;
      r.tokens += static_cast<int64_t>(w.size());
      if (sink) GRIDQ_RETURN_IF_ERROR(sink(static_cast<int64_t>(b + i), w, p, V));
      p += w.size() * static_cast<size_t>(V);
    }
    if (opts.on_progress)
      opts.on_progress(static_cast<int64_t>(b + nb), static_cast<int64_t>(windows.size()));
  }
  r.windows = static_cast<int64_t>(windows.size());
  r.mean_nll = nll / static_cast<double>(r.positions);
  r.ppl = std::exp(r.mean_nll);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gridq::eval

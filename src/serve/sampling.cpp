#include "serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace gridq::serve {

SampledToken Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> generated, std::span<const int32_t> banned,
                             int top_logprobs) {
  const size_t V = logits.size();
  // Model logprobs (float64 log-sum-exp) for reporting.
  double mx = -std::numeric_limits<double>::infinity();
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double se = 0.0;
  for (float x : logits) se += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(se);

  std::vector<double> z(logits.begin(), logits.end());  // [vocab] processed scores
  if (p_.repetition_penalty != 1.0 || p_.presence_penalty != 0.0 || p_.frequency_penalty != 0.0) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : generated) ++counts[t];
    if (p_.repetition_penalty != 1.0) {
      std::vector<char> seen(V, 0);
      for (int32_t t : prompt)
        if (t >= 0 && static_cast<size_t>(t) < V) seen[t] = 1;
      for (int32_t t : generated)
        if (t >= 0 && static_cast<size_t>(t) < V) seen[t] = 1;
      for (size_t i = 0; i < V; ++i)
        if (seen[i]) z[i] = z[i] > 0 ? z[i] / p_.repetition_penalty : z[i] * p_.repetition_penalty;
    }
    for (const auto& [t, c] : counts) {
      if (t < 0 || static_cast<size_t>(t) >= V) continue;
      z[t] -= p_.frequency_penalty * c + p_.presence_penalty;
    }
  }
  for (const auto& [t, b] : p_.logit_bias)
    if (t >= 0 && static_cast<size_t>(t) < V) z[t] += b;
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int32_t t : banned)
    if (t >= 0 && static_cast<size_t>(t) < V) z[t] = ninf;

  int32_t chosen = 0;
  if (p_.temperature <= 0.0) {
    // Greedy; ties go to the lowest id so the choice is deterministic.
    chosen = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  } else {
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    size_t keep = V;
    if (p_.top_k > 0) keep = std::min(keep, static_cast<size_t>(p_.top_k));
    const double zmax = z[idx[0]];
    std::vector<double> pr(keep);
    double sum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      pr[i] = std::isinf(z[idx[i]]) ? 0.0 : std::exp((z[idx[i]] - zmax) / p_.temperature);
      sum += pr[i];
    }
    if (p_.min_p > 0.0) {
      const double thr = p_.min_p * pr[0];
      while (keep > 1 && pr[keep - 1] < thr) sum -= pr[--keep];
    }
    if (p_.top_p < 1.0) {
      double acc = 0.0;
      size_t k = 0;
      while (k < keep) {
        acc += pr[k++];
        if (acc >= p_.top_p * sum) break;
      }
      keep = std::max<size_t>(k, 1);
      sum = 0.0;
      for (size_t i = 0; i < keep; ++i) sum += pr[i];
    }
    // One uniform draw per token from the sequence's own generator.
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * sum;
    double acc = 0.0;
    chosen = idx[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      acc += pr[i];
      if (u < acc) {
        chosen = idx[i];
        break;
      }
    }
  }
  SampledToken out;
  out.token = chosen;
  out.logprob = static_cast<float>(static_cast<double>(logits[chosen]) - lse);
  if (top_logprobs > 0) {
    std::vector<int32_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    const size_t k = std::min(V, static_cast<size_t>(top_logprobs));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(idx[i], static_cast<float>(static_cast<double>(logits[idx[i]]) - lse));
  }
  return out;
}

}  // namespace gridq::serve

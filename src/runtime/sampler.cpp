#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace gridq::runtime {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> history, const SamplingParams& p) {
  if (p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  std::unordered_map<int32_t, int> count;
  for (int32_t t : history)
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) ++count[t];
  for (const auto& [t, c] : count) {
    float& l = logits[static_cast<size_t>(t)];
    if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
  }
}

std::vector<double> filtered_probs(std::span<const float> logits, const SamplingParams& p) {
  const size_t V = logits.size();
  std::vector<double> prob(V, 0.0);
  const double temp = p.temperature > 0.0f ? p.temperature : 1.0;
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double z = 0.0;
  for (size_t i = 0; i < V; ++i) z += (prob[i] = std::exp((logits[i] - mx) / temp));
  for (double& v : prob) v /= z;
  // Candidates sorted by probability, descending; ties keep the lower id first.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[static_cast<size_t>(a)] > prob[static_cast<size_t>(b)]; });
  size_t keep = V;
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double mass = 0.0;
    size_t n = 0;
    double kept_total = 0.0;
    for (size_t i = 0; i < keep; ++i) kept_total += prob[static_cast<size_t>(order[i])];
    while (n < keep) {
      mass += prob[static_cast<size_t>(order[n])] / kept_total;
      ++n;
      if (mass >= p.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (p.min_p > 0.0f) {
    const double thr = p.min_p * prob[static_cast<size_t>(order[0])];
    size_t n = 0;
    while (n < keep && prob[static_cast<size_t>(order[n])] >= thr) ++n;
    keep = std::max<size_t>(n, 1);
  }
  std::vector<double> out(V, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += prob[static_cast<size_t>(order[i])];
  for (size_t i = 0; i < keep; ++i) out[static_cast<size_t>(order[i])] = prob[static_cast<size_t>(order[i])] / total;
  return out;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  std::vector<float> l(logits.begin(), logits.end());
  apply_penalties(l, history, p_);
  if (p_.temperature <= 0.0f) return argmax(l);
  std::vector<double> prob = filtered_probs(l, p_);
  const double u = rng_.uniform();
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    if (prob[i] <= 0.0) continue;
    last = static_cast<int32_t>(i);
    acc += prob[i];
    if (u < acc) return last;
  }
  return last;  // rounding left u above the total mass: the last candidate
}

bool Sampler::is_stop_token(int32_t id) const {
  return std::find(p_.stop_token_ids.begin(), p_.stop_token_ids.end(), id) != p_.stop_token_ids.end();
}

int64_t Sampler::stop_string_cut(const std::string& text) const {
  int64_t best = -1;
  for (const auto& s : p_.stop_strings) {
    if (s.empty()) continue;
    const size_t pos = text.find(s);
    if (pos != std::string::npos && (best < 0 || static_cast<int64_t>(pos) < best)) best = static_cast<int64_t>(pos);
  }
  return best;
}

}  // namespace gridq::runtime

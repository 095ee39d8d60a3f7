#include "runtime/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <utility>

namespace gridq::runtime {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

template <class T>
int32_t argmax_lowest(std::span<const T> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

bool in_vocab(int32_t t, size_t V) { return t >= 0 && static_cast<size_t>(t) < V; }

}  // namespace

// Step 8: log-softmax of the raw logits at `token` and the `k` most likely ids.
void add_logprobs(std::span<const float> logits, int k, SampledToken& out) {
  const size_t V = logits.size();
  double mx = -std::numeric_limits<double>::infinity();
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double se = 0.0;
  for (float x : logits) se += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(se);
  out.logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(out.token)]) - lse);
  if (k <= 0) return;
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const size_t n = std::min(V, static_cast<size_t>(k));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(),
                    [&](int32_t a, int32_t b) {
                      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  for (size_t i = 0; i < n; ++i)
    out.top.emplace_back(idx[i],
                         static_cast<float>(static_cast<double>(logits[static_cast<size_t>(idx[i])]) - lse));
}

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

int32_t argmax(std::span<const float> logits) { return argmax_lowest(logits); }
int32_t argmax(std::span<const double> scores) { return argmax_lowest(scores); }

std::vector<ScoreEdit> score_edits(size_t V, std::span<const int32_t> prompt,
                                   std::span<const int32_t> generated, std::span<const int32_t> banned,
                                   const SamplingParams& p) {
  // id -> edit, ordered by id. Penalties first (apply_penalties' rules), then the bias, then the ban.
  std::map<int32_t, ScoreEdit> e;
  auto at = [&](int32_t t) -> ScoreEdit& {
    ScoreEdit& x = e[t];
    x.id = t;
    return x;
  };
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int64_t> count;
    for (int32_t t : prompt)
      if (in_vocab(t, V)) count[t] += p.penalties_count_prompt ? 1 : 0;
    for (int32_t t : generated)
      if (in_vocab(t, V)) ++count[t];
    for (const auto& [t, c] : count) {
      ScoreEdit& x = at(t);
      x.rep = p.repetition_penalty != 1.0f;
      if (c > 0)
        x.sub = static_cast<double>(p.presence_penalty) + p.frequency_penalty * static_cast<double>(c);
    }
  }
  for (const auto& [t, b] : p.logit_bias)
    if (in_vocab(t, V)) at(t).bias += static_cast<double>(b);
  for (int32_t t : banned)
    if (in_vocab(t, V)) at(t).banned = true;
  std::vector<ScoreEdit> out;
  out.reserve(e.size());
  for (const auto& [t, x] : e) out.push_back(x);
  return out;
}

void apply_edits(std::span<double> s, std::span<const ScoreEdit> edits, double repetition) {
  for (const ScoreEdit& x : edits) {
    double& v = s[static_cast<size_t>(x.id)];
    if (x.rep) v = v > 0.0 ? v / repetition : v * repetition;
    v -= x.sub;
    v += x.bias;
    if (x.banned) v = -std::numeric_limits<double>::infinity();
  }
}

void apply_allowed(std::span<double> s, std::span<const uint64_t> allowed) {
  const double ninf = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t w = i >> 6;
    if (w >= allowed.size() || !((allowed[w] >> (i & 63)) & 1)) s[i] = ninf;
  }
}

void apply_penalties(std::span<double> scores, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, const SamplingParams& p) {
  SamplingParams only = p;  // step 2 alone
  only.logit_bias.clear();
  apply_edits(scores, score_edits(scores.size(), prompt, generated, {}, only),
              static_cast<double>(p.repetition_penalty));
}

std::vector<double> sampling_scores(std::span<const float> logits, std::span<const int32_t> prompt,
                                    std::span<const int32_t> generated, std::span<const int32_t> banned,
                                    const SamplingParams& p) {
  std::vector<double> s(logits.begin(), logits.end());
  apply_edits(s, score_edits(s.size(), prompt, generated, banned, p),
              static_cast<double>(p.repetition_penalty));
  return s;
}

namespace {

// The ids of w [V] in (w descending, id ascending) order — the order std::sort gives with that comparator —
// by a stable LSD radix sort on the keys ~bits(w): the weights are non-negative, so their IEEE bits order as
// unsigned integers, and the ids start ascending, so ties keep it. 11-bit digits (six passes; a 2,048-bin
// count stays in L1, faster than 16-bit digits from 4k to 152k ids); a pass whose digit every key shares is
// skipped. O(V): the comparison sort was most of a filtered 100k-vocabulary row's host time (12 of 12.4 ms
// on one core; 3.2 ms now), which the CUDA backend pays for each row its device sort cannot hold.
std::vector<int32_t> order_by_weight(const std::vector<double>& w) {
  const size_t V = w.size();
  std::vector<uint64_t> key(V), key2(V);
  std::vector<int32_t> id(V), id2(V);
  for (size_t i = 0; i < V; ++i) key[i] = ~std::bit_cast<uint64_t>(w[i]), id[i] = static_cast<int32_t>(i);
  constexpr int kBits = 11;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  std::vector<uint32_t> at(size_t{1} << kBits);
  for (int shift = 0; shift < 64 && V > 1; shift += kBits) {
    std::fill(at.begin(), at.end(), 0u);
    for (uint64_t k : key) ++at[(k >> shift) & kMask];
    if (at[(key[0] >> shift) & kMask] == V) continue;  // one digit for every key: the order stands
    uint32_t sum = 0;
    for (uint32_t& c : at) sum += std::exchange(c, sum);
    for (size_t i = 0; i < V; ++i) {
      const uint32_t slot = at[(key[i] >> shift) & kMask]++;
      key2[slot] = key[i], id2[slot] = id[i];
    }
    key.swap(key2);
    id.swap(id2);
  }
  return id;
}

}  // namespace

std::vector<double> filtered_probs(std::span<const double> scores, const SamplingParams& p) {
  const size_t V = scores.size();
  std::vector<double> w(V, 0.0);
  double m = -std::numeric_limits<double>::infinity();
  for (double s : scores) m = std::max(m, s);
  if (!(m > -std::numeric_limits<double>::infinity())) return w;  // everything banned: no distribution
  const double T = p.temperature > 0.0f ? static_cast<double>(p.temperature) : 1.0;
  for (size_t i = 0; i < V; ++i) w[i] = std::exp((scores[i] - m) / T);  // exp(-inf) = 0 for banned ids
  const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < V;
  const bool top_p = p.top_p < 1.0f;
  const bool min_p = p.min_p > 0.0f;
  if (top_k || top_p || min_p) {  // without a filter the sort is skipped: nothing is dropped either way
    const std::vector<int32_t> order = order_by_weight(w);
    auto wt = [&](size_t j) { return w[static_cast<size_t>(order[j])]; };
    size_t n = top_k ? static_cast<size_t>(p.top_k) : V;
    if (top_p) {
      double kept = 0.0;
      for (size_t j = 0; j < n; ++j) kept += wt(j);
      const double target = static_cast<double>(p.top_p) * kept;
      double acc = 0.0;
      size_t k = 0;
      while (k < n) {
        acc += wt(k++);
        if (acc >= target) break;
      }
      n = std::max<size_t>(k, 1);
    }
    if (min_p) {
      const double thr = static_cast<double>(p.min_p) * wt(0);
      size_t k = 0;
      while (k < n && wt(k) >= thr) ++k;
      n = std::max<size_t>(k, 1);
    }
    for (size_t j = n; j < V; ++j) w[static_cast<size_t>(order[j])] = 0.0;
  }
  double total = 0.0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

int32_t pick_token(std::span<const double> probs, double u) {
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;  // adds nothing to the CDF; skipping keeps `last` a real candidate
    last = static_cast<int32_t>(i);
    acc += probs[i];
    if (u < acc) return last;
  }
  return last;
}

SamplePlan Sampler::plan(size_t V, std::span<const int32_t> prompt, std::span<const int32_t> generated,
                         std::span<const int32_t> banned, int top_logprobs) {
  SamplePlan pl;
  pl.greedy = p_.temperature <= 0.0f;
  pl.temperature = pl.greedy ? 1.0 : static_cast<double>(p_.temperature);
  pl.top_k = p_.top_k;
  pl.top_p = static_cast<double>(p_.top_p);
  pl.min_p = static_cast<double>(p_.min_p);
  pl.repetition = static_cast<double>(p_.repetition_penalty);
  pl.edits = score_edits(V, prompt, generated, banned, p_);
  pl.top_logprobs = top_logprobs;
  if (!pl.greedy) pl.u = rng_.uniform();  // one per sampled token, whatever the filters leave
  return pl;
}

std::optional<std::string> nonfinite_logits(std::span<const float> row) {
  int64_t nan = 0, pos_inf = 0, finite = 0, first_bad = -1;
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (std::isfinite(v)) {
      ++finite;
      continue;
    }
    nan += std::isnan(v) ? 1 : 0;
    pos_inf += !std::isnan(v) && v > 0 ? 1 : 0;
    if ((std::isnan(v) || v > 0) && first_bad < 0) first_bad = static_cast<int64_t>(i);
  }
  if (first_bad < 0 && finite > 0) return std::nullopt;
  if (first_bad < 0)
    return fmt::format(
        "the model produced no finite logit (all {} are -inf); the checkpoint or its config is broken for "
        "this "
        "input",
        row.size());
  return fmt::format(
      "the model produced non-finite logits ({} NaN, {} +inf of {}, first at token id {}); the checkpoint or "
      "its "
      "config is broken for this input",
      nan, pos_inf, row.size(), first_bad);
}

SampledToken Sampler::run(const SamplePlan& plan, std::span<const float> logits) {
  SampledToken out;
  if (logits.empty()) return out;
  if (auto bad = nonfinite_logits(logits)) {
    out.token = -1;
    out.bad_logits = std::move(*bad);
    return out;
  }
  std::vector<double> s(logits.begin(), logits.end());
  apply_edits(s, plan.edits, plan.repetition);
  if (!plan.allowed.empty()) apply_allowed(s, plan.allowed);
  if (plan.greedy) {
    out.token = argmax(std::span<const double>(s));
  } else {
    SamplingParams p;
    p.temperature = static_cast<float>(plan.temperature);
    p.top_k = plan.top_k;
    p.top_p = static_cast<float>(plan.top_p);
    p.min_p = static_cast<float>(plan.min_p);
    out.token = pick_token(filtered_probs(s, p), plan.u);
  }
  add_logprobs(logits, plan.top_logprobs, out);
  return out;
}

std::vector<SampledToken> sample_rows(std::span<const float> logits, size_t V,
                                      std::span<const SamplePlan* const> plans) {
  std::vector<SampledToken> out(plans.size());
  for (size_t r = 0; r < plans.size(); ++r) {
    if (plans[r])
      out[r] = Sampler::run(*plans[r], logits.subspan(r * V, V));
    else
      out[r].token = -1;
  }
  return out;
}

SampledToken Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> generated, std::span<const int32_t> banned,
                             int top_logprobs) {
  if (logits.empty()) return {};
  return run(plan(logits.size(), prompt, generated, banned, top_logprobs), logits);
}

bool Sampler::is_stop_token(int32_t id) const {
  return std::find(p_.stop_token_ids.begin(), p_.stop_token_ids.end(), id) != p_.stop_token_ids.end();
}

int64_t Sampler::stop_string_cut(const std::string& text) const {
  int64_t best = -1;
  for (const auto& s : p_.stop_strings) {
    if (s.empty()) continue;
    const size_t pos = text.find(s);
    if (pos != std::string::npos && (best < 0 || static_cast<int64_t>(pos) < best))
      best = static_cast<int64_t>(pos);
  }
  return best;
}

}  // namespace gridq::runtime

// Per-request sampling (server.md §2, §8): penalties, logit bias, temperature, top-k/top-p/min-p, and a
// per-sequence seeded RNG, so a sequence's tokens depend only on its own logits, parameters and seed, never
// on what else is in the batch. Logprobs are the model's log-softmax before any processing.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gridq::serve {

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;
  int32_t top_k = -1;  // -1 or 0 = off
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::map<int32_t, double> logit_bias;
  uint64_t seed = 0;  // the scheduler derives one per choice when the request has none
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, most likely first
};

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(std::move(p)), rng_(p_.seed) {}
  // `logits` [vocab]; `prompt` and `generated` feed the penalties; `banned` ids are masked (min_tokens).
  SampledToken sample(std::span<const float> logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> generated, std::span<const int32_t> banned, int top_logprobs);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace gridq::serve

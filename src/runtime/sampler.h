// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition/presence/frequency penalties,
// stop token ids and stop strings, with an explicitly seeded RNG (xoshiro256** seeded by splitmix64), so
// the same seed and the same logits give the same tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gridq::runtime {

struct SamplingParams {
  float temperature = 1.0f;  // <= 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;  // HF style: logit > 0 ? logit / p : logit * p, on tokens seen
  float presence_penalty = 0.0f;    // OpenAI style: logit -= presence if count > 0
  float frequency_penalty = 0.0f;   // logit -= frequency * count
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;
};

// xoshiro256** (Blackman & Vigna), seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1) with 53 bits
 private:
  uint64_t s_[4];
};

// Applies penalties in place: `history` is every token the penalties count (prompt and/or output).
void apply_penalties(std::span<float> logits, std::span<const int32_t> history, const SamplingParams& p);

// Probabilities after temperature and the top-k / top-p / min-p filters; filtered entries are exactly 0.
// Order of filters (as in HF/vLLM): temperature, top-k, top-p, min-p, then renormalise. Returns fp64.
std::vector<double> filtered_probs(std::span<const float> logits, const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(SamplingParams p) : p_(std::move(p)), rng_(p_.seed) {}
  // Samples one token from `logits` (penalties applied to a copy using `history`).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  bool is_stop_token(int32_t id) const;
  // If `text` (the full generated text so far) ends a stop string, returns the length of `text` to keep
  // (stop string excluded); otherwise -1. Stop strings are matched anywhere in the text.
  int64_t stop_string_cut(const std::string& text) const;
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  Rng rng_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace gridq::runtime

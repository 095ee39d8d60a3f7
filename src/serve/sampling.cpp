#include "serve/sampling.h"

#include <random>

namespace gridq::serve {

uint64_t choice_seed(const std::optional<int64_t>& seed, int index) {
  if (!seed) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
  }
  if (index == 0) return static_cast<uint64_t>(*seed);
  uint64_t z = static_cast<uint64_t>(*seed) + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

runtime::SamplingParams choice_sampling(const GenParams& g, int index) {
  runtime::SamplingParams sp = g.sampling;
  sp.penalties_count_prompt = false;
  sp.seed = choice_seed(g.seed, index);
  // Stops are the scheduler's (stop ids, banned below min_tokens) and the output processor's (strings,
  // matched per channel), not the sampler's.
  sp.stop_token_ids.clear();
  sp.stop_strings.clear();
  return sp;
}

void fill_sched_request(SchedRequest& r, const GenParams& g, int64_t max_tokens,
                        std::vector<int32_t> stop_ids, int offset) {
  r.n = g.n;
  r.max_tokens = max_tokens;
  r.min_tokens = g.min_tokens;
  r.top_logprobs = g.logprobs ? g.top_logprobs : 0;
  r.stop_ids = std::move(stop_ids);
  for (int c = 0; c < g.n; ++c) r.sampling.push_back(choice_sampling(g, offset + c));
}

}  // namespace gridq::serve

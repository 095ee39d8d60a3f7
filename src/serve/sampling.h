// What a request's generation fields become for the scheduler (api.md §2, §8). Sampling itself is the
// runtime's (runtime/sampler.h, the sampler `gridq generate` uses); this maps onto it the two things that are
// the server's own: OpenAI/vLLM penalty semantics (presence/frequency count the completion's tokens only) and
// one seed per choice, so choice 0 of a request with seed S samples exactly as `gridq generate --seed S`.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/sampler.h"
#include "serve/openai_protocol.h"
#include "serve/scheduler.h"

namespace gridq::serve {

// Choice 0 gets the request's seed itself; choice i > 0 a splitmix64 of (seed, i), a distinct reproducible
// stream; without a request seed, a fresh random one.
uint64_t choice_seed(const std::optional<int64_t>& seed, int index);

// The runtime sampler's parameters for choice `index` of a request.
runtime::SamplingParams choice_sampling(const GenParams& g, int index);

// Fills the scheduler's view of a request: its n choices are choices offset .. offset + n - 1 of the API
// request (completions with several prompts number them across prompts).
void fill_sched_request(SchedRequest& r, const GenParams& g, int64_t max_tokens,
                        std::vector<int32_t> stop_ids, int offset);

}  // namespace gridq::serve

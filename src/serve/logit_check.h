// Non-finite logits (issue 14 item 4): a NaN or +inf in a row of logits means the model is broken for this
// input (a bad weight, an overflow), and sampling from it would serve garbage or a token chosen by NaN
// comparison order. The request fails with a 500 naming the cause (runtime::nonfinite_logits) instead.
#pragma once

#include "runtime/sampler.h"
#include "serve/scheduler.h"

namespace gridq::serve {

// For the scheduler's step loop, on a sampled row: when the sampler found the row unusable
// (tok.bad_logits, wherever it sampled), fails the request with a 500 `non_finite_logits` naming the cause
// and cancels it, so its sequences are freed at the next step boundary as for a client that left. Returns
// true then (the row yields no token).
bool fail_on_non_finite(const runtime::SampledToken& tok, SchedRequest& req);

}  // namespace gridq::serve

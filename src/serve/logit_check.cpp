#include "serve/logit_check.h"

namespace gridq::serve {

bool fail_on_non_finite(const runtime::SampledToken& tok, SchedRequest& req) {
  if (tok.bad_logits.empty()) return false;
  // cancelled first: the request's other choices must not be sampled from this step on either.
  const bool first = !req.cancelled.exchange(true);
  if (first) req.on_error(500, "non_finite_logits", tok.bad_logits);
  return true;
}

}  // namespace gridq::serve

#include "serve/logit_check.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

namespace gridq::serve {

std::optional<std::string> non_finite_logits(std::span<const float> row) {
  int64_t nan = 0, pos_inf = 0, finite = 0, first_bad = -1;
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (std::isfinite(v)) {
      ++finite;
      continue;
    }
    const bool bad = std::isnan(v) || v > 0;
    nan += std::isnan(v) ? 1 : 0;
    pos_inf += !std::isnan(v) && v > 0 ? 1 : 0;
    if (bad && first_bad < 0) first_bad = static_cast<int64_t>(i);
  }
  if (first_bad < 0 && finite > 0) return std::nullopt;
  if (first_bad < 0)
    return fmt::format(
        "the model produced no finite logit (all {} are -inf); the checkpoint or its config is "
        "broken for this input",
        row.size());
  return fmt::format(
      "the model produced non-finite logits ({} NaN, {} +inf of {}, first at token id {}); the "
      "checkpoint or its config is broken for this input",
      nan, pos_inf, row.size(), first_bad);
}

bool fail_on_non_finite(std::span<const float> row, SchedRequest& req) {
  auto bad = non_finite_logits(row);
  if (!bad) return false;
  // cancelled first: the request's other choices must not be sampled from this step on either.
  const bool first = !req.cancelled.exchange(true);
  if (first) req.on_error(500, "non_finite_logits", *bad);
  return true;
}

}  // namespace gridq::serve

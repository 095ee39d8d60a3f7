// Non-finite logits (issue 14 item 4): a NaN or +inf in a row of logits means the model is broken for this
// input (a bad weight, an overflow), and sampling from it would serve garbage or a token chosen by NaN
// comparison order. The request fails with a 500 naming the cause instead.
#pragma once

#include <optional>
#include <span>
#include <string>

namespace gridq::serve {

// The error message for a logits row that holds a NaN or +inf, or has no finite value at all; nullopt for a
// usable row (-inf entries are allowed: they only rule tokens out).
std::optional<std::string> non_finite_logits(std::span<const float> row);

}  // namespace gridq::serve

// MoE routing of one token (laguna.md §1.4 steps 1-5; Qwen3-MoE softmax variant), all in fp32.
// The correction bias only chooses experts; weights always come from the unbiased scores.
#pragma once

#include <cstdint>

#include "model/model_spec.h"

namespace gridq::runtime {

// z [E] router logits, bias [E] or nullptr. Writes the k chosen experts (descending biased score, ties to the
// lower index) to idx[k] and their weights to weight[k].
void route_token(const float* z, int n_experts, const float* bias, int k, model::RouterScore score,
                 bool renormalize, int* idx, float* weight);

}  // namespace gridq::runtime

// What the server says about its weights at start (issue #6 item 5, api.md §10): the formats the loaded
// model really runs, one line per format naming the CPU kernel path that format takes, and the `format`
// label of gridq:model_info. Read from the QMatrix objects the backend executes, not from file names, so a
// gridbook artifact reports its FP8 / CB rungs and a plain checkpoint BF16 (or F32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_weights.h"

namespace gridq::serve {

struct WeightFormatUse {
  std::string label;  // "BF16", "F32", "FP8_W8A8" or the CB rung name ("NVFP4_CB_K16")
  int act_bits = 16;  // activation contract of the matrices in this group
  int64_t matrices = 0;
  int64_t params = 0;  // sum of rows * cols
};

// Groups every matrix of `w` (embedding, attention, MLP/MoE, router, lm_head) by format and activation
// contract, in first-seen order (embedding first).
std::vector<WeightFormatUse> weight_format_uses(const runtime::ModelWeights& w);

// "weights FP8_W8A8: 16 matrices, 1.05M params -> runtime/cpu/matmul.cpp W8A8 ...": one line per group,
// naming the CPU path or (cuda) the CUDA engine's, whose per-kernel counts the backend reports beside it.
std::string kernel_line(const WeightFormatUse& u, bool cuda = false);

// The distinct format labels joined with '+' ("BF16+FP8_W8A8"): gridq:model_info{format}.
std::string format_label(const std::vector<WeightFormatUse>& uses);

}  // namespace gridq::serve

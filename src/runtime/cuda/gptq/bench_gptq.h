// `gridq bench quantize`: seconds of GPU CB-GPTQ (factorization + encode) for one MoE layer's routed experts
// at a model's real shapes, and the extrapolation to every MoE layer of the model (issue 12's ≤ 75 s per
// layer). Synthetic inputs built on the device; nothing is written.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "runtime/cuda/gptq/gptq.h"

namespace gridq::cuda {

struct CbGptqBenchOptions {
  std::string shape = "laguna-s-2.1";
  int experts = 0;      // of the layer's (0: all of them; fewer: the time is scaled to the layer)
  int chunk = 32;       // experts per batch
  int64_t rows = 5120;  // rows behind each expert's H (131,072 tokens · 10 / 256)
  uint64_t seed = 1;
  bool rtn = false;       // also time the RTN encode (the holdout gate's other side)
  int refine_passes = 8;  // the laguna recipe's refinement (8 passes, scales on); 0: CB-GPTQ only
  std::function<void(int done, int total)> progress;
};

Expected<nlohmann::json> bench_cb_gptq(const CbGptqBenchOptions& o, const CbGptqBook& book);

}  // namespace gridq::cuda

// `gridq bench quantize` (cmd_bench_quant.cpp): the GPU CB-GPTQ encoder on one MoE layer's experts.
#pragma once

#include <cstdint>
#include <string>

namespace gridq::cli {

struct BenchQuantFlags {
  std::string shape = "laguna-s-2.1";
  std::string rung = "NVFP4_CB_K16";
  int experts = 0, chunk = 32, refine_passes = 8;
  int64_t rows = 5120;
  uint64_t seed = 1;
  bool rtn = false, json = false;
  std::string out;
};

int run_bench_quant(const BenchQuantFlags& f);

// `gridq bench checkpoint`: a synthetic BF16 HF checkpoint at a model's real shapes (runtime/cuda/
// bench_checkpoint.h).
struct BenchCheckpointFlags {
  std::string shape = "laguna-s-2.1";
  int layers = 3;
  uint64_t seed = 1;
  std::string tokenizer_from = "models/laguna-tiny-code";
  std::string out;
  bool json = false;
};

int run_bench_checkpoint(const BenchCheckpointFlags& f);

}  // namespace gridq::cli

// `gridq bench kernels`: times the decode kernels on synthetic weights of Laguna-S-2.1 decode shapes.
// Each row is a stack of distinct weight matrices (48, or 47 MoE layers) launched back to back, captured in
// one CUDA graph, with inputs and weights rotated so that the stack is far beyond the 60 MB L2. Reported per
// row: µs per matrix (or layer), bytes moved, GB/s and % of a device-to-device copy measured in the same run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace gridq::cuda {

struct BenchOptions {
  int replays = 20;  // timed graph replays per row (median reported)
  int warmup = 3;
  std::string filter;            // only rows whose name contains this
  bool pdl = true;               // programmatic dependent launch between the kernels of a stack
  bool progress = true;          // print each row to stderr as it completes
  long long min_warp_bytes = 0;  // 0: the library default (set_gemv_min_warp_bytes)
  int blocks_per_sm = -1;        // -1: the library default (set_gemv_blocks_per_sm)
  bool l2_prefetch = false;
  bool diag = false;           // also run the diagnostic rows (bench_util.h run_diag)
  bool chain = true;           // also time every dense / CB stack as one persistent chain (gemv_chain)
  int chain_copy_engine = -1;  // -1: library default; 0: cp.async ring; 1: copy-engine ring
};

Expected<nlohmann::json> run_kernel_bench(const BenchOptions& o);

// A short human-readable table of run_kernel_bench's result.
std::string format_bench_table(const nlohmann::json& result);

}  // namespace gridq::cuda

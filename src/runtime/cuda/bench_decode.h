// `gridq bench decode`: whole-model decode throughput on the CUDA backend (hopper.md §10, §11). The model is
// a full-size synthetic one built on the device (--synthetic NAME, synthetic_model.h) or a real artifact / HF
// directory. For every (batch, context) cell it opens `batch` sequences at length `context`, runs `warmup`
// decode steps, resets the lengths and times `steps` decode steps (one token per sequence per forward, the
// last row's logits copied back), then the same steps sampled greedily on the device (forward_sampled: only
// the tokens come back, as `serve` runs a step; tok_s_sampled; --temperature / --top-p / --top-k sample
// instead), then the steps with per-phase timing on.
// Reported per cell: ms per step, tok/s, bytes streamed per step (estimate, see below), GB/s and % of a 1 GiB
// device-to-device copy measured in the same run, µs per phase; plus machine, commit, driver and CUDA
// runtime.
//
// Bytes per step (hopper.md §10): the weights actually read — every non-expert weight once per step (lm_head
// included, one embedding row per token), and per MoE layer the expected number of distinct experts that
// `batch` tokens choose under uniform random routing, E·(1 − (1 − k/E)^batch), times one expert's bytes —
// plus the KV read: per sequence and step at position p, full layers (p + 1)·n_kv·d·2·2 bytes, sliding layers
// min(p + 1, W)·n_kv·d·2·2, averaged over the timed positions context .. context + steps − 1.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace gridq::cuda {

struct BenchDecodeOptions {
  std::string synthetic;  // a synthetic_model_names() entry, or empty with model_dir
  std::string model_dir;  // an artifact (config.json with quantization_config) or HF checkpoint directory
  std::vector<int> batches{1, 4, 16};
  std::vector<int> contexts{0, 8192, 32768};
  int steps = 32;  // timed decode steps per cell
  int warmup = 4;
  uint64_t seed = 1;     // synthetic weights and token ids
  bool progress = true;  // print a table row per cell to stderr as it completes
  bool pdl = true;       // the forward's launches chained by programmatic dependent launch
  // `gridq bench prefill`: prompt lengths to prefill (one sequence, the last row's logits copied back: the
  // time to first token); with batches empty only these are measured.
  std::vector<int> prefill;
  int prefill_repeats = 3;       // timed prefills per length (median), after one untimed
  long long max_num_batched_tokens = 0;  // rows of one forward step (DeviceOptions)
  long long min_warp_bytes = 0;  // GEMV work-split knob (kernels.h set_gemv_min_warp_bytes); 0 = default
  int blocks_per_sm = -1;        // GEMV blocks per SM (kernels.h set_gemv_blocks_per_sm); -1 = default
  int l2_ahead = -1;             // forward_kernels.h kL2Ahead* mask (0: none; -1: kL2AheadAuto)
  int beside = 3;                // forward_kernels.h kBeside* mask (3: both, the default)
  // The sampled pass's sampling (serve's parameters; temperature 0: greedy, the default, whose tokens are
  // checked against the logits rows' argmaxes). Each step plans every row with runtime::Sampler (seed).
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
};

// Cells whose context + steps (or prefill length) pass the model's max_position_embeddings are listed under
// "skipped".
Expected<nlohmann::json> run_bench_decode(const BenchDecodeOptions& o);

// A short human-readable table of run_bench_decode's result.
std::string format_bench_decode_table(const nlohmann::json& result);

}  // namespace gridq::cuda

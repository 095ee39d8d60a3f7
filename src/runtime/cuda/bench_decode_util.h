// Pieces of `gridq bench decode` (bench_decode.cpp): the copy-bandwidth ceiling and the byte
// model of one decode step (what the forward streams, from the device model itself, so it holds for
// synthetic and real weights alike).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_spec.h"
#include "runtime/cuda/bench_decode.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_model.h"

namespace gridq::cuda::decode_bench {

// What one decode step streams.
struct StreamBytes {
  double fixed = 0;      // non-expert weights (lm_head, norms, codebooks included), read once per step
  double embed_row = 0;  // one embedding row (read per token)
  double experts = 0;    // one routed expert of every MoE layer, summed over the layers
  nlohmann::json kernels = nlohmann::json::object();  // DevLinear::kernel -> count
  // Weight bytes a step reads in each phase of the forward's phase timing (forward_layers.cpp's marks),
  // summed over the layers; the routed experts, the KV and the embedding rows depend on the cell and are
  // added by phase_bytes.
  std::map<std::string, double> phase_weights;
  int fused_moe_layers = 0, moe_layers = 0;
};
StreamBytes stream_bytes(const model::ModelSpec& spec, const DeviceModel& dm);

// Bytes per phase of one step of `batch` rows: phase_weights, plus the routed experts' (`distinct` experts a
// layer) in "moe routed", the KV read in "attn core", the embedding rows in "embed".
std::map<std::string, double> phase_bytes(const StreamBytes& sb, int batch, double distinct, double kv);

// K+V bytes (BF16) one sequence reads in a step at position p, the new key included: p + 1 keys on full
// layers, min(p + 1, window) on sliding layers.
double kv_bytes_at(const model::ModelSpec& spec, int64_t p);

// Issue 10's batch-scaling ratio, added to every cell with a batch-1 cell at the same context:
// "vs_batch1_bytes_scaled" = ms_per_step / ((bytes_per_step / batch-1 bytes_per_step) x batch-1 ms_per_step),
// the step time against the batch-1 step scaled by the bytes the larger step reads (1.0: the same GB/s as
// batch 1; the bar for batch 8 is <= 1.2). Cells without a batch-1 partner are left as they are.
void add_batch1_ratios(nlohmann::json& cells);

// FNV-1a of the logits' bytes (recorded with every timing, hopper.md §11).
uint64_t fnv1a(const std::vector<float>& v);

// `gridq bench prefill` (bench_prefill.cpp): for every o.prefill length, one sequence prefilled from empty
// (one untimed run, then o.prefill_repeats timed; std::chrono around the synchronous forward that returns
// the last row's logits), then once more with phase timing. Cells: length, ms (median), tok/s, the time to
// first token, µs per phase over the whole prompt, logits hash.
Expected<nlohmann::json> run_prefill_cells(CudaBackend& be, const BenchDecodeOptions& o,
                                           runtime::SeqId& next_id);

}  // namespace gridq::cuda::decode_bench

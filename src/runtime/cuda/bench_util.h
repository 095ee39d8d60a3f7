// Pieces of `gridq bench kernels` shared by its row files (bench.cpp, bench_diag.cpp): graph capture and
// timing, the row record, the name filter.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/cuda/bench.h"
#include "runtime/cuda/kernels.h"

namespace gridq::cuda::bench {

using nlohmann::json;

inline constexpr int kStack = 48;  // distinct matrices per dense row
inline constexpr int kMoeLayers = 47;

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  ~Events() {
    if (a) (void)cudaEventDestroy(a);
    if (b) (void)cudaEventDestroy(b);
  }
};

struct Ctx {
  cudaStream_t s;
  const BenchOptions& o;
  Workspace ws;
  double copy_gbs;
  json rows = json::array();
};

double median(std::vector<double> v);
// Device-to-device copy of 1 GiB of random bytes, read + write bytes over the median of `copies` timed copies
// after 3 untimed ones, in GB/s: the ceiling every benchmark reports against (hopper.md §10).
Expected<double> copy_bandwidth(cudaStream_t s, int copies);
// The current time, UTC, ISO 8601 ("2026-12-01T08:53:37Z").
std::string utc_now();

// Captures `enqueue` into a graph, replays it o.warmup times, then times o.replays replays with events;
// returns the median in ms (and (max - min) / median in `spread`).
Expected<double> time_graph(cudaStream_t s, const std::function<Status(cudaStream_t)>& enqueue,
                            const BenchOptions& o, double* spread);

// Adds µs per item, GB/s and % of the copy figure to `row` and appends it (and prints it when o.progress).
void record(Ctx& c, json row, double ms, double spread, double items, double bytes_per_item);

// filter: '|'-separated substrings; a row runs when its name contains any of them.
bool wanted(const Ctx& c, const std::string& name);

// Per-kernel timeline of a traced stack (gemv_kernel's %globaltimer stamps), averaged over kernels 1..n-1 of
// one graph replay; times in µs relative to the end of the previous kernel's last block ("prev end").
struct TraceSummary {
  int kernels = 0, blocks = 0;
  double period = 0;       // prev end -> this kernel's last block ends
  double first_start = 0;  // prev end -> first block starts (negative: started under the previous kernel)
  double last_start = 0;   // prev end -> last block starts
  double tables = 0;       // block start -> shared tables ready (mean over blocks)
  double released = 0;     // prev end -> first block past griddepcontrol.wait
  double first_end = 0;    // prev end -> first block ends
  json to_json() const;
};
TraceSummary summarize_trace(const std::vector<unsigned long long>& words, int kernels);

// Per-phase timeline of a traced persistent chain, averaged over phases 1..n-1, µs relative to the moment the
// last block finished the previous phase ("prev done").
struct ChainTraceSummary {
  int phases = 0, blocks = 0;
  double period = 0;         // prev done -> last block done with this phase
  double first_release = 0;  // prev done -> first block past the barrier
  double last_release = 0;   // prev done -> last block past the barrier
  double first_done = 0;     // prev done -> first block done with this phase
  json to_json() const;
};
ChainTraceSummary summarize_chain_trace(const std::vector<unsigned long long>& words, int phases, int blocks);

// A stack of kStack dense or CB matrices [rows, in], optionally fused swiglu; with `trace`, the stack is also
// traced (the row is then run whatever the filter says).
// 47 MoE layers of Laguna-S-2.1's shapes as one graph (bench_moe.cpp).
Status moe_row(Ctx& c, int M);
Status dense_row(Ctx& c, const std::string& name, WeightFormat f, int k, int v, int rows, int in, int M,
                 bool swiglu, TraceSummary* trace = nullptr, ChainTraceSummary* chain_trace = nullptr);

// Diagnostic rows (--diag): empty-kernel and streaming-read stacks in the same harness, a persistent stream,
// and per-kernel timelines of GEMV stacks.
Status run_diag(Ctx& c);

}  // namespace gridq::cuda::bench

// Learned pooled codebooks (quantizer.md §3 "Learned pooled books"; `--codebooks learned`, format.md §10-§11
// codebook_source "learned"): importance-weighted Lloyd's with grid snapping on the actual scaled sub-vectors
// of the routed weights, starting from the lattice book. The result has exactly the lattice book's table
// shapes, so every encoder (cb_gptq.h) uses it unchanged.
//
// Samples. Each matrix is scaled the way the encoder scales it, with the lattice book: fp4 v2 runs the pilot
// (m2) and the two-tier superblock search (scale_search_v2.h) and divides every group of 16 by its scale
// T[c]·2^(E−127); FP8-CB divides every row by its fp32 row scale. Every codeword (8 weights) gives one
// sub-vector sample to each sub-table (sub i = coordinates [i·d, i·d + d)). Coordinate j of a sample carries
// the weight n·q_j·s² (n = LearnInput::weight, the input's token count; q = imatrix = diag(H)/n; s the
// scale): n·q_j is diag(H)_j, so busy experts count more (quantizer.md §3), and s² makes the objective the
// importance-weighted error in weight space, Σ_j diag(H)_j (w_j − ŵ_j)², which is what the encoder's output
// error sees (our reconstruction: quantizer.md weights by diag(H) alone; LearnOptions::scale_weighted = false
// gives that). At most max_samples samples per sub-table: when the pool is larger, the same fraction of rows
// of every matrix is kept, evenly spaced. Rows are scaled independently, so the kept rows get the scales a
// whole-matrix search gives them, except that the pilot (m2, which only centres the exponent window) runs on
// the first kept rows rather than the matrix's first rows; with every row kept it is the encoder's pilot.
//
// Lloyd's, per sub-table, in float64: assign each sample to argmin_k Σ_j w_j (x_j − c_kj)² (ties: lowest k);
// move each entry to the weighted mean c_j = Σ w_j x_j / Σ w_j (a coordinate with Σ w = 0 keeps its value);
// snap each coordinate to the grid (ties to the smaller magnitude). An entry with no samples or one that
// duplicates an earlier entry is reseeded with the snapped worst-fit sample (largest weighted distance, ties
// to the lowest sample index) not already in the table. `iterations` updates; the table with the lowest
// total weighted error among the start (lattice) and every iterate is kept, so the book is never worse than
// the lattice on its own samples. Finally the entries are sorted lexicographically. Sums run in sample order
// and the parallel assignment writes per-sample results only, so the bytes do not depend on the thread count.
//
// Pooling. The caller decides which matrices share a book. gridq's reader requires one book per routed
// stack (gate_up and down of a layer share codebook_ref; per-role books are refused, format.md §9, §15), so
// the supported pooling is "every routed matrix at this rung" (codebook_group null), in a fixed order
// (layer, expert, gate/up/down).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/rung.h"
#include "quant/scale_search_v2.h"

namespace gridq::quant {

struct LearnInput {
  const float* W = nullptr;  // [rows, cols] fp32, finite
  int rows = 0;
  int cols = 0;                    // % 256 == 0
  const float* imatrix = nullptr;  // [cols] diag(H)/n, finite, >= 0
  double weight = 1.0;             // n, the input's token count (diag(H) = n·imatrix); >= 0, finite
  std::string name;                // for errors
};

struct LearnOptions {
  int iterations = 4;               // Lloyd updates (quantizer.md §3: 4, starting from the lattice)
  int64_t max_samples = 2'000'000;  // per sub-table
  bool scale_weighted = true;       // sample weight n·q·s² (true) or n·q (false)
  TwoTierOptions two_tier;          // fp4 v2 scale search
  int fp8_refits = 2;               // FP8-CB row-scale refits
};

struct LearnReport {
  struct Sub {
    int64_t samples = 0;
    double error_lattice = 0.0;  // total weighted error of the lattice table on the samples
    double error_learned = 0.0;  // of the returned table (<= error_lattice)
    int best_iteration = 0;      // 0 = the lattice itself was best
  };
  std::vector<Sub> sub;  // [n_sub]
};

// Streaming form: the pipeline adds matrices one at a time (a layer's weights can be freed after add()).
// `total_codewords` = Σ rows·cols/8 over every matrix that will be added (known from the plan), which fixes
// the row sampling rate before any weight is read. add() in a fixed order gives a fixed book.
class CodebookLearner {
 public:
  static Expected<std::unique_ptr<CodebookLearner>> create(const gridbook::Rung& rung,
                                                           int64_t total_codewords,
                                                           const LearnOptions& opt = {});
  ~CodebookLearner();
  Status add(const LearnInput& in);
  // Runs Lloyd's and returns the book; refuses a pool without any sample of non-zero weight.
  Expected<gridbook::Codebook> finish(LearnReport* report = nullptr);

 private:
  CodebookLearner() = default;
  struct State;
  std::unique_ptr<State> s_;
};

// All at once: create + add each input in order + finish.
Expected<gridbook::Codebook> learn_codebook(const gridbook::Rung& rung, std::span<const LearnInput> mats,
                                            const LearnOptions& opt = {}, LearnReport* report = nullptr);

}  // namespace gridq::quant

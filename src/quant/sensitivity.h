// Measured sensitivity for bit allocation (quantizer.md §7, docs/quantize.md "Budget allocation"): the
// model's output KL against its BF16 teacher when some routed-expert stacks are replaced by candidate
// encodings, measured with the CPU backend (the reference forward) on calibration sequences.
//
//   auto probe = KlProbe::create(model, seqs, threads);      // runs the teacher once, keeps its log-probs
//   double kl = probe->kl({stack_l1_k20, stack_l3_k12});     // everything else stays BF16
//
// The student is the BF16 model with exactly the given layers' routed experts swapped for the stored
// candidate bytes (CB rungs run as served: the scheme's activation QDQ, act_bits 4 for NVFP4 grids, 8 for
// FP8 grids); every other weight is the teacher's. KL is Σ_v p_v (log p_v − log q_v) with both sides
// log-softmaxed in float64, averaged over each sequence's first len−1 positions (the positions `gridq eval`
// scores), summed in position order: the result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/rung.h"
#include "model/loader.h"
#include "quant/allocate.h"
#include "quant/capture.h"

namespace gridq::quant {

// One layer's routed-expert stacks in one candidate format, as staged (quant/export.h stacked layout).
struct ProbeStack {
  int layer = -1;
  std::string format;                            // "BF16" (no swap) or a CB rung name
  const gridbook::Codebook* codebook = nullptr;  // CB rungs
  std::span<const uint8_t> gate_up;              // U8 [E, 2I, row_bytes(H)] (gate rows first)
  std::span<const uint8_t> down;                 // U8 [E, H, row_bytes(I)]
  std::span<const uint8_t> gate_up_scale;        // FP8-CB: F32 [E, 2I]; empty otherwise
  std::span<const uint8_t> down_scale;           // FP8-CB: F32 [E, H]
};

class KlProbe {
 public:
  // seqs: token ids, each sequence a fresh context from position 0 (≥ 2 tokens each). Runs the BF16 teacher
  // over them once and keeps its fp32 log-probs ([positions, vocab]). `model` must outlive the probe.
  static Expected<std::unique_ptr<KlProbe>> create(const model::LoadedModel& model,
                                                   std::vector<std::vector<int32_t>> seqs, int threads);

  // Mean KL(teacher ‖ student) over every scored position. At most one stack per layer; a BF16 stack is
  // the teacher's own weights. Refuses formats other than BF16 and CB rungs, and bytes of the wrong size.
  Expected<double> kl(std::span<const ProbeStack> stacks);

  int64_t positions() const { return positions_; }
  int64_t tokens() const;

 private:
  KlProbe() = default;
  // Log-probs [positions, vocab] of the model with `stacks` swapped in.
  Expected<std::vector<double>> run(std::span<const ProbeStack> stacks, const std::vector<float>* teacher);

  const model::LoadedModel* model_ = nullptr;
  std::vector<std::vector<int32_t>> seqs_;
  int threads_ = 0;
  int64_t positions_ = 0;
  std::vector<float> teacher_lp_;  // [positions, vocab]
};

// ---------------------------------------------------------------------------------------------------------
// The measured allocation of the quantize driver (allocate.h "Measured allocation") over staged candidates.

// The two calibration splits (by sequence index, in order): `check` = the held-out sequences (they never
// entered H); `sens` = non-holdout sequences evenly spaced, as many as `check` holds (at least one).
struct ProbeSplits {
  std::vector<int> sens, check;
};
Expected<ProbeSplits> probe_splits(const CalibSet& calib);

struct MeasureInputs {
  const model::LoadedModel* model = nullptr;
  const CalibSet* calib = nullptr;
  int threads = 0;
  // Per unit (in `units` order) its decoder layer, and the staging shard that holds "<unit>|<format>|<name>".
  std::vector<int> unit_layer;
  std::vector<std::string> unit_stage_file;
  const std::map<std::string, gridbook::Codebook>* codebooks = nullptr;
  std::function<void(const std::string& what)> on_step;  // progress
};

struct MeasuredResult {
  MeasuredAllocation alloc;
  std::vector<std::vector<double>> sens;  // [unit][option]
  nlohmann::json report;                  // provenance.allocation["measured"]
};

// Measures every unit's options alone (sens split), then allocate_measured with the check split.
Expected<MeasuredResult> measure_allocation(const std::vector<AllocUnit>& units, double budget_bpw,
                                            const MeasureInputs& in);

}  // namespace gridq::quant

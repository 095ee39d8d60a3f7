// One layer of the layer-streamed teacher (layer_streamer.cpp runs its chunks): the layer's captures (H and
// holdout rows per Linear input), the hooks that route the forward's rows into them, the S4 checks' samples
// and counters, and the checks and statistics at the end (layer_streamer_run.cpp). Internal to src/quant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/capture.h"
#include "quant/hessian_accum.h"
#include "quant/identity_check.h"
#include "quant/layer_streamer_impl.h"
#include "runtime/cpu/layer_ops.h"

namespace gridq::quant {

// One captured input: H of the non-holdout rows, the holdout reservoir, and its RMSNorm identity.
struct Capture {
  std::string name;
  HessianAccumulator acc;
  HoldoutRows hold;
  Capture(std::string n, int cols) : name(std::move(n)), acc(cols), hold(cols) {}
  int64_t bytes() const { return acc.bytes() + hold.bytes(); }
  InputStats finish();
};

class LayerRun {
 public:
  // Layer l's captures (on the device when opts.device_hessians) and sample plan.
  static Expected<std::unique_ptr<LayerRun>> create(const LayerStreamer::Impl& st, int l);

  // The forward's hooks for the chunk of sequences [s0, s0 + n) (chunk 0 also takes the checks' samples).
  runtime::cpu::LayerHooks hooks();
  void begin_chunk(int64_t s0, int64_t chunk) { s0_ = s0, chunk_ = chunk; }
  void end_chunk() { h_mlp_ = nullptr; }
  int64_t capture_bytes() const;
  // The forward's temporaries for a chunk of T rows (a, q/k/v/o, residual adds, the widest MLP
  // intermediate pair, the routing).
  int64_t forward_bytes(int64_t T) const;
  // Every accumulator of the layer, for the chunk's absorb.
  std::vector<HessianAccumulator*> accumulators();

  // S4: the identity, recompute, routing and count checks into out.checks (failures are reported by the
  // caller); then every capture's statistics into out (in parallel), and the routing counts.
  Status checks(LayerCapture& out);
  Status finish(LayerCapture& out);

 private:
  LayerRun(const LayerStreamer::Impl& st, int l);
  std::vector<Capture*> all();

  const LayerStreamer::Impl& st_;
  const int l_;
  const model::ModelSpec& spec_;
  const model::LayerSpec& L_;
  const runtime::LayerWeights& lw_;
  const bool moe_;
  const int64_t H_, S_, qw_, E_, K_;
  const std::string pre_;

  Capture attn_in_, o_in_, mlp_in_;
  std::unique_ptr<Capture> dense_down_, shared_down_;
  std::vector<std::unique_ptr<Capture>> ex_in_, ex_down_;
  RmsIdentity id_attn_, id_mlp_;
  std::vector<RmsIdentity> id_ex_;
  std::vector<int64_t> counts_;     // non-holdout routing counts
  std::vector<int64_t> routed_;     // all routing choices (holdout too)
  std::vector<int64_t> delivered_;  // rows the expert hooks received

  // Chunk-0 samples for the recompute checks.
  std::vector<int64_t> att_seqs_, att_pos_, mlp_rows_;
  std::vector<std::vector<float>> att_a_, att_o_;  // [S, H], [|pos|, qw]
  std::vector<float> smp_a2_, smp_u_;              // [|mlp_rows|, H], [|mlp_rows|, D or I_s]
  std::vector<int> smp_idx_;                       // [|mlp_rows|, K]
  std::vector<float> smp_wt_;                      // [|mlp_rows|, K]
  std::vector<std::vector<float>> smp_ex_x_, smp_ex_u_;

  const float* h_mlp_ = nullptr;  // the residual the mlp_in rows normalised (valid during the MLP)
  int64_t s0_ = 0, chunk_ = 0;
};

}  // namespace gridq::quant

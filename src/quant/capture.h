// Calibration (quantizer.md §2 S1–S4): the calibration windows, the layer-streamed BF16 teacher forward,
// and the per-input second-moment statistics (H = XᵀX, imatrix, holdout rows) every encoder consumes.
//
//   auto calib = make_calib_set("data/code-calib.txt", tok, {});            // S1
//   auto st = LayerStreamer::create("models/laguna-tiny-code", *calib, {}); // h_0 = embeddings
//   for (int l = 0; l < st->num_layers(); ++l) {
//     auto cap = st->run_layer(l);   // S2 + S3 + S4: captures of layer l; the carry becomes h_{l+1}
//     ... encode layer l from cap and the source weights ...
//   }
//
// Inputs to layer l always come from the BF16 teacher, never from quantized layers, so a layer's captures
// depend only on the source checkpoint and the calibration set (checkpoints are exact, resume is exact).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/loader.h"
#include "runtime/model_weights.h"
#include "text/tokenizer.h"

namespace gridq::quant {

// ---- S1: calibration windows ----

struct CalibOptions {
  int64_t tokens = 65536;  // total tokens (n_seq = tokens / seq_len; the text must supply them)
  int seq_len = 512;
  int holdout_every = 16;  // every k-th sequence (k-1, 2k-1, …) is held out of H; 0 = none
};

struct CalibSet {
  int n_seq = 0;
  int seq_len = 0;
  std::vector<int32_t> ids;      // [n_seq, seq_len]
  std::vector<uint8_t> holdout;  // [n_seq] 1 = held out: runs through the forward, never enters H
  bool bos = false;              // whether each sequence starts with the tokenizer's BOS (its own policy)
  std::vector<int32_t>
      bos_ids;                // the ids that open every sequence (the post-processor's prefix; empty if none)
  int64_t stream_tokens = 0;  // tokens in the whole text; the unused tail is dropped
  std::string text_sha256;    // of the calibration file's bytes
  std::string tokenizer_sha256;  // of tokenizer.json's bytes
  int64_t tokens() const { return static_cast<int64_t>(n_seq) * seq_len; }
};

// Tokenizes the file as one stream (no special tokens), cuts it into n_seq = opts.tokens / seq_len
// non-overlapping sequences, each opened by the tokenizer's own prefix (bos_ids: what encode(...,
// add_special_tokens=true) puts before the text; none for laguna-tiny-code), and drops the tail. Fails,
// naming the file and the counts, when the text is too short; fails on a missing file or bad options.
Expected<CalibSet> make_calib_set(const std::string& text_path, const text::Tokenizer& tok,
                                  const std::string& tokenizer_json_path, const CalibOptions& opts);

// ---- S3: statistics of one Linear input ----

struct InputStats {
  std::string name;  // which input, e.g. "layers.3.attn_in", "layers.3.experts.7.down_in" (see LayerCapture)
  int cols = 0;      // C
  int64_t n = 0;     // rows accumulated into H (non-holdout tokens that reached this input)
  std::vector<float> H;        // [C, C] Σ xᵀx, fp32, fixed 256-row block order (thread-count independent)
  std::vector<float> imatrix;  // [C] diag(H) / n (all zeros when n == 0)
  int64_t n_hold = 0;          // rows in `holdout` (≤ 512)
  std::vector<float> holdout;  // [n_hold, C] rows from held-out sequences, in token order
  int64_t hold_seen = 0;       // held-out rows that reached this input; every (hold_seen/n_hold)-th is kept
};

// S4 results for one checked input.
struct IdentityCheck {
  std::string input;     // InputStats::name
  std::string kind;      // "rmsnorm" (δ of quantizer.md §2 S4), "recompute" (relative L2 error of a float64
                         // reference), "routing" (tokens whose recomputed expert set differs, near-ties
                         // skipped) or "count" (routing choices that did not reach their expert's H)
  double value = 0.0;    // δ, the relative error, or a count
  double threshold = 0;  // 0.05 (δ), 1e-2 (recompute), 0 (routing, count)
  bool pass = false;
};

// Every capture of one decoder layer. Which Linear reads which input (the encoder side uses this map), and
// the InputStats::name of each (l = layer):
//   attn_in         q, k, v, g_proj                         "layers.l.attn_in"   (input_layernorm output)
//   o_in            o_proj                                  "layers.l.o_in"      (gated attention output)
//   mlp_in          router, shared gate/up, dense gate/up   "layers.l.mlp_in"    (post_attention_layernorm
//   output) dense_down_in   dense-MLP down_proj                     "layers.l.dense_down_in"  (dense layers
//   only) shared_down_in  shared-expert down_proj                 "layers.l.shared_down_in" (MoE with a
//   shared expert) expert_in[e]    expert e gate/up, over only the rows routed to e
//   "layers.l.experts.e.gate_up_in" expert_down_in[e] expert e down_proj, u = SiLU(gate·x) ⊙ (up·x) there
//   "layers.l.experts.e.down_in"
// Inputs a layer does not have stay default (cols 0). checks: "rmsnorm" on attn_in, mlp_in and every expert
// with rows; "recompute" on o_in, dense/shared_down_in, every sampled expert's down_in and the router
// weights ("layers.l.router"); "routing" ("layers.l.router"); "count" ("layers.l.experts").
struct LayerCapture {
  int layer = 0;
  InputStats attn_in, o_in, mlp_in, dense_down_in, shared_down_in;
  std::vector<InputStats> expert_in;       // [E] (empty on dense layers)
  std::vector<InputStats> expert_down_in;  // [E]
  std::vector<int64_t> expert_counts;      // [E] routed rows of non-holdout tokens; Σ = n_tok · top_k
  std::vector<IdentityCheck> checks;       // every S4 check that ran (all passed, or run_layer failed)
  double seconds = 0.0;                    // wall time of run_layer
  // device_forward: of those, the GPU teacher's layer upload, its steps (forward and copies back) and the
  // hooks it fed (capture bookkeeping, the Hessian rows' uploads); the rest is the absorbs and the S4 checks.
  double teacher_upload_s = 0.0, teacher_steps_s = 0.0, teacher_hooks_s = 0.0;
  // Every path: the chunks' Hessian absorbs, the S4 checks, and the statistics' finish (H and holdout
  // handed over).
  double absorb_s = 0.0, checks_s = 0.0, finish_s = 0.0;
};

struct StreamerOptions {
  int threads = 0;              // 0 = OpenMP default (sets it process-wide); results do not depend on it
  int64_t chunk_tokens = 8192;  // tokens per forward chunk (whole sequences, at least one); H does
                                // not depend on it
  bool router_weighted_hessian = false;  // H_e = Σ g_te² x xᵀ (quantizer.md §2 S3)
  double identity_threshold = 0.05;
  double recompute_threshold = 1e-2;
  bool device_hessians = false;  // H on the GPU (`quantize --device cuda`): the same bits, another engine
  // The teacher forward on the GPU (`quantize --device cuda`): the device engine's layer (runtime::
  // DeviceTeacher), so the captures carry its numbers (BF16 matrix inputs), not the CPU engine's.
  bool device_forward = false;
};

// The layer-streamed teacher forward. Only the current layer's weights are touched; the carry h [n_tok, H]
// is kept in fp32 — the same numbers as gridq's CPU engine, whose logits match the HF fixture — so
// run_layer(l) is a pure function of (checkpoint, calib, h_l). (quantizer.md keeps it in BF16 to halve the
// carry at Laguna-S scale; fp32 here is our choice: 128 MiB at 64k tokens of the tiny model.)
class LayerStreamer {
 public:
  static Expected<std::unique_ptr<LayerStreamer>> create(const std::string& model_dir, const CalibSet& calib,
                                                         const StreamerOptions& opts);
  ~LayerStreamer();
  const model::ModelSpec& spec() const;
  int num_layers() const;
  int next_layer() const;  // the layer the carry is the input of

  // Runs layer next_layer() over every calibration sequence, captures its inputs, runs the S4 checks
  // (an error naming the layer, input, value and threshold when one fails) and advances the carry. After
  // an error the streamer refuses further layers until load_carry restores a verified carry.
  Expected<LayerCapture> run_layer();

  // Resume support: the carry's bytes (fp32 [n_tok, H]) and their SHA-256; restore sets the carry and
  // next_layer (the caller checks the digest it recorded). The file is a 32-byte header (magic "GQCARRY1",
  // int32 next_layer, int32 0, int64 n_tok, int64 H; little-endian) and the raw fp32 data; load refuses a
  // header that does not match (layer, calibration size, model width) or a short/long file.
  std::string carry_sha256() const;
  Status save_carry(const std::string& path) const;
  Status load_carry(const std::string& path, int next_layer);

  // The largest footprint of the streamer's own buffers so far: carry + accumulators + holdout rows + the
  // chunk's KV caches and forward temporaries (an estimate of the latter). Weights are mmapped, not counted.
  int64_t peak_bytes() const;
  // The device teacher's largest footprint so far (one layer's weights + its buffers); 0 on the CPU.
  int64_t peak_device_bytes() const;

  // For tests and evaluation: h_{next_layer} [n_tok, H] and the weights the teacher runs.
  const std::vector<float>& carry() const;
  const runtime::ModelWeights& weights() const;

 private:
  friend class LayerRun;  // one layer's captures (layer_streamer_run.h) read the streamer's state
  LayerStreamer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridq::quant

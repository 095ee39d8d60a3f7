// The `gridq quantize` driver (quantizer.md §2 S0–S7): plan → calibration windows → for each decoder layer:
// the layer-streamed teacher forward with capture (capture.h) → encode every tensor of the layer by its
// planned format (encode_tensor.h) → write that layer's shard (export.h) → update the resume manifest
// (manifest.h); then the non-layer shard, the metadata files, S7 (reader + bit-exact decode) and PINS.json,
// and the atomic rename OUT.partial → OUT.
//
//   QuantizeOptions o;  o.src = "models/laguna-tiny-code";  o.out = "/tmp/q";  o.recipe = "laguna";
//   o.calib = "data/code-calib.txt";
//   auto summary = quantize(o);   // summary->to_json() is what `--json` prints
//
// The per-layer encode (pipeline_tasks.cpp: resolve_tasks, encode_layer_tensors, encode_budget_units) is
// separated from the streamer so tests can drive it with synthetic statistics.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "gridbook/codec.h"
#include "model/loader.h"
#include "quant/book_keys.h"
#include "quant/capture.h"
#include "quant/encode_tensor.h"
#include "quant/export.h"
#include "quant/recipe.h"

namespace gridq::quant {

struct QuantizeOptions {
  std::string src;        // BF16 HF checkpoint directory
  std::string out;        // artifact directory to create (OUT.partial while running)
  std::string recipe;     // preset name or path to a recipe JSON
  std::string repo_root;  // recipes/ is looked up here first (the CLI passes the working directory)
  std::string calib;      // calibration text file
  int64_t calib_tokens = 65536;
  int seq_len = 512;
  std::string method;       // "" = the recipe's encoders; "cb-gptq" or "rtn" replaces them for CB and FP8
  double budget_bpw = 0.0;  // > 0: choose the routed-expert rungs (and attention) by knapsack to this bpw
  bool budget_attention = false;  // with budget_bpw: attention q/k/v and o also choose FP8_DYNAMIC or BF16
  // with budget_bpw: the candidates of every routed-expert stack, cheapest first
  std::vector<std::string> budget_formats = {"NVFP4_CB_K12", "NVFP4_CB_K16", "NVFP4_CB_K20", "NVFP4_CB_K24"};
  // with budget_bpw: "measured" (output KL of the model on calibration text, checked against every uniform
  // plan that fits on the held-out split) or "proxy" (the knapsack on D = ½·tr(ΔW H ΔWᵀ)/T alone)
  std::string budget_score = "measured";
  std::string codebooks;  // "" = the recipe's; "lattice" or "learned" replaces it
  int threads = 0;        // 0 = OpenMP default; the bytes do not depend on it
  // "cpu" or "cuda": where the capture's Hessians are accumulated (the bytes do not depend on it; the
  // teacher forward and the encoders run on the CPU either way, for now)
  std::string device = "cpu";
  // "auto" (on with --device cuda), "on" or "off": capture layer l+1 while layer l is encoded (the bytes do
  // not depend on it; host memory holds two layers' input statistics)
  std::string overlap_capture = "auto";
  bool strict = false;        // a recipe rule that matches nothing is an error
  bool overwrite = false;     // replace an existing OUT at the end
  bool resume = true;         // continue a matching OUT.partial; false: start over
  int stop_after_layer = -1;  // test hook: stop (resumable) after finishing this layer
  Progress::Mode progress = Progress::Mode::kAuto;
  // "" = off; "hadamard": the residual stream is rotated first (quant/rotate.h; a BF16 copy of SRC with the
  // rotation folded in is written to OUT.rotated-src and removed at the end) and the rotated model quantized.
  std::string rotate;
  uint64_t rotate_seed = 0x6772696471524f54ull;  // quant/rotate.h kDefaultRotationSeed
};

// One source tensor resolved against the recipe, the options and the model.
struct TensorTask {
  std::string name;    // source tensor name
  int rule = -1;       // recipe rule index
  std::string format;  // final format (budget units: the recipe's until the allocation decides)
  EncodeParams params;
  std::string unit;     // plan_unit_name
  int layer = -1;       // decoder layer of the tensor, -1 = the non-layer shard
  std::string role;     // WeightMap role ("layers.3.attn.q"), empty when the tensor backs none or several
  bool budget = false;  // the allocator chooses among `options`
  std::vector<std::string> options;  // budget_options(): the candidate formats, cheapest first
  std::string rule_encoder;          // the rule's encoder when its format is quantized, else empty
  std::string method;                // the --method override ("" = none)
};

// The encoder a tensor encoded as `format` uses: "copy" for BF16, else the --method override ("cb-gptq" /
// "rtn"), else the rule's encoder (empty for a BF16 rule), else the format's default (rtn for FP8_DYNAMIC,
// cb_gptq for CB rungs).
std::string encoder_for(const std::string& format, const std::string& rule_encoder,
                        const std::string& method);

// Exact stored bits of one [R, C] Linear in `format`, as assemble_tensors writes it (scales included), so an
// infeasible budget fails from the plan alone.
Expected<int64_t> stored_bits(const std::string& format, int64_t R, int64_t C);

// The bytes of a source tensor as a SourceWeight (an error naming it when the checkpoint lacks it).
Expected<SourceWeight> source_weight(const io::Checkpoint& ckpt, const std::string& name);

// The format candidates of a task's unit under --budget-bpw, cheapest first (empty: the recipe decides):
// routed-expert stacks o.budget_formats; with budget_attention, attention q/k/v and o FP8_DYNAMIC or BF16.
std::vector<std::string> budget_options(const TensorTask& t, const QuantizeOptions& o);

// Resolves every planned tensor: method/codebook overrides, the layer and role, and the checks that need the
// model (a quantized format needs a captured input: embeddings, lm_head and norms must stay BF16).
Expected<std::vector<TensorTask>> resolve_tasks(const Recipe& recipe, const Plan& plan,
                                                const model::LoadedModel& model, const QuantizeOptions& o);

// The captured input a Linear with this role reads (capture.h's map), nullptr for roles without one.
// Refuses a Linear role whose input is missing from the capture.
Expected<const InputStats*> input_for_role(const LayerCapture& cap, const std::string& role);

// Where a layer's encode time went (--device cuda's expert batches: the device calls, the host's decode and
// choices, the output proxies of the kept candidates; the rest one tensor at a time).
struct EncodeSeconds {
  double expert_device = 0.0, expert_host = 0.0, expert_proxy = 0.0, other = 0.0;
};
// Encodes every task of `layer` (or of the non-layer rest for layer = -1) whose format is final (budget
// units are skipped; encode them with encode_budget_units). `codebooks`: rung name → book. `on_tensor` is
// called before each tensor (progress). S4 results of `cap` are attached to the stats by input name.
// `secs`, when given, accumulates the time split.
Expected<std::vector<EncodedTensor>> encode_layer_tensors(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture* cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string&)>& on_tensor = {}, EncodeSeconds* secs = nullptr);

// Whether `role` is a routed expert's matrix ("layers.3.moe.experts.17.up": gate, up or down): the tasks
// encode_experts_on_device may take, and the ones the other tensors' thread leaves to it.
bool is_routed_expert_role(const std::string& role);

// --device cuda: the routed experts of `layer` whose rule the GPU batch encodes (NVFP4-CB K12-K24 v2 by
// CB-GPTQ without act-order, or RTN), in chunks of experts sharing one device call (encode_experts.cpp);
// keyed by index into `tasks`. The bytes and records are encode_tensor's for each of them.
Expected<std::map<size_t, EncodedTensor>> encode_experts_on_device(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture& cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string&)>& on_tensor = {}, EncodeSeconds* secs = nullptr);

// The codebook of a CB format for `tensor` (its layer's book when the books are per layer; nullptr for the
// other formats).
Expected<const gridbook::Codebook*> codebook_for(const std::map<std::string, gridbook::Codebook>& codebooks,
                                                 const std::string& format, const std::string& tensor);

// --budget-bpw: every option of every budget unit of one layer, encoded for real, with its exact stored size
// and its output-MSE proxy ½·Σ tr(ΔW H ΔWᵀ) over the unit's matrices (D = half_trace / T).
struct BudgetOption {
  std::string format;
  int64_t bits = 0;  // 8 × the stored bytes of the unit in this format
  double half_trace = 0.0;
  nlohmann::json stats = nlohmann::json::object();  // source tensor -> LinearStats::to_json()
  std::vector<StoredTensor> tensors;                // what the shard stores if this option is chosen
  std::vector<CbSlice> cb_slices;
};
struct BudgetUnit {
  std::string unit;  // plan_unit_name, e.g. "model.layers.1.mlp.experts"
  int64_t params = 0;
  std::vector<BudgetOption> options;  // in TensorTask::options order
};
Expected<std::vector<BudgetUnit>> encode_budget_units(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture& cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string& format, const std::string& tensor)>& on_tensor = {});

struct QuantizeSummary {
  std::string out;
  bool finished = false;  // false: stopped after stop_after_layer; OUT.partial is kept for resuming
  int layers = 0;         // decoder layers
  int resumed_at = 0;     // first layer this run computed (0 = from scratch)
  int64_t calib_tokens = 0;
  double seconds = 0.0;
  int64_t peak_rss_bytes = 0;
  int64_t peak_device_bytes = 0;  // core/device_meter.h: gridq's device buffers, the most at once (0: CPU)
  nlohmann::json formats = nlohmann::json::object();  // format -> {params, bytes, bpw}
  nlohmann::json allocation;                          // budget mode only
  std::vector<std::string> checks;                    // S7 lines
  nlohmann::json to_json() const;
};

Expected<QuantizeSummary> quantize(const QuantizeOptions& o);

}  // namespace gridq::quant

// The quantize pipeline's driver (pipeline.h's quantize), internal to src/quant/pipeline*.cpp: its state and
// steps, one file per part: pipeline.cpp (options, the partial artifact and resume, the run),
// pipeline_layers.cpp (codebooks, the layer-streamed capture and encode), pipeline_finish.cpp (assembly,
// checks, pins).
#pragma once

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "core/version.h"
#include "gridbook/artifact.h"
#include "io/sha256.h"
#include "quant/allocate.h"
#include "quant/export.h"
#include "quant/lattice_codebook.h"
#include "quant/learned_codebook.h"
#include "quant/manifest.h"
#include "quant/pipeline.h"
#include "quant/rotate_options.h"
#include "quant/sensitivity.h"
#include "runtime/device.h"
#include "text/tokenizer.h"

namespace gridq::quant::pipeline_detail {

namespace fs = std::filesystem;

inline constexpr const char* kResumeDir = "resume";
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kLearnedBooksFile = "learned_books.pqcb";

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline std::string carry_file(int next_layer) { return fmt::format("carry-{:05}.bin", next_layer); }
inline std::string stage_file(int layer) { return fmt::format("stage-{:05}.safetensors", layer); }

// `--device cuda` runs the teacher forward and the Hessians on the GPU.
inline StreamerOptions streamer_options(const QuantizeOptions& o, const Recipe& recipe) {
  StreamerOptions so;
  so.threads = o.threads;
  so.router_weighted_hessian = recipe.router_weighted_hessian;
  so.device_hessians = o.device == "cuda";
  so.device_forward = o.device == "cuda";
  return so;
}

inline nlohmann::json check_to_json(const IdentityCheck& c) {
  return {
      {"input", c.input}, {"kind", c.kind}, {"value", c.value}, {"threshold", c.threshold}, {"pass", c.pass}};
}

struct Driver {
  const QuantizeOptions& o;
  Recipe recipe;
  Plan plan;
  model::LoadedModel model;
  std::vector<TensorTask> tasks;
  std::map<std::string, gridbook::Codebook> codebooks;  // rung name -> book
  std::string codebook_source = "lattice";
  std::optional<text::Tokenizer> tok;
  CalibSet calib;
  ResumeInputs inputs;
  Manifest manifest;
  std::string partial, resume_dir;
  int n_layers = 0;
  int64_t T = 0;  // tokens that entered H (non-holdout), the D(u, f) denominator
  std::unique_ptr<Progress> progress;
  std::string device_line;  // --device cuda: which GPU, logged once the progress output exists
  nlohmann::json rotation;  // --rotate: what was folded in (provenance)

  explicit Driver(const QuantizeOptions& opts) : o(opts) {}

  std::string manifest_path() const { return (fs::path(resume_dir) / kManifestFile).string(); }
  std::string partial_file(const std::string& f) const { return (fs::path(partial) / f).string(); }
  std::string resume_file(const std::string& f) const { return (fs::path(resume_dir) / f).string(); }

  // The encoder of a task encoded as `format` (budget options may differ from the rule's format).
  std::string encoder_of(const TensorTask& t, const std::string& format) const {
    return encoder_for(format, t.rule_encoder, t.method);
  }
  // Whether a learned book for CB rung `f` pools this task's weight.
  bool learns_from(const TensorTask& t, const std::string& f) const {
    if (t.format == f && !t.budget) return true;
    if (!t.budget) return false;
    return std::find(t.options.begin(), t.options.end(), f) != t.options.end();
  }

  Status prepare();
  Expected<int> open_partial();  // returns the first layer to compute
  Status build_codebooks(int start_layer);
  Status run_layers(int start, QuantizeSummary& s);
  Status finish(QuantizeSummary& s);
  // The carry into the next layer as saved right after the capture (its file in resume/, its SHA-256): with
  // overlapped layers the streamer has moved on by the time the layer is written.
  struct SavedCarry {
    std::string file, sha256;
  };
  Status write_layer(int layer, const LayerCapture& cap, const SavedCarry& carry, size_t device_peak,
                     double fwd_s);
  // A layer's shard is written (and hashed) on a second thread while the next layer is encoded; its record
  // enters the manifest only once the file is complete (commit_layer), so a run killed meanwhile resumes at
  // that layer, as before.
  std::future<Expected<std::string>> shard_write;  // the SHA-256 of the shard being written
  LayerRecord shard_rec;                           // its layer's record, committed with it
  Status commit_layer();
};

}  // namespace gridq::quant::pipeline_detail

// The resume manifest of `gridq quantize` (quantizer.md §9 "Resumable checkpoints"). It lives in
// OUT.partial/resume/ next to the hidden-state carries, and is rewritten (atomically) after every finished
// decoder layer: the digests of everything the output depends on, then per layer its shard (name + SHA-256),
// the carry file written after it (name + SHA-256 of the carried h_{l+1}), the per-Linear records and the CB
// slices S7 checks. A rerun with the same inputs verifies the recorded shards and carry and continues at the
// first unfinished layer; because layer inputs always come from the BF16 teacher, that gives the same bytes
// as an uninterrupted run. Different inputs refuse to resume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace gridq::quant {

// What the output depends on. Two runs may share a partial output only if every field is equal.
struct ResumeInputs {
  std::string recipe_sha256;   // recipe file bytes
  std::string source_sha256;   // config.json + the tensor table (names, dtypes, shapes, shard sizes)
  std::string calib_sha256;    // calibration text bytes
  std::string options_sha256;  // canonical JSON of every option that changes bytes (incl. gridq commit)
  nlohmann::json to_json() const;
  static Expected<ResumeInputs> from_json(const nlohmann::json& j);
  // Empty when equal, else "recipe (sha256 ab12… vs cd34…)" for the first differing field.
  std::string diff(const ResumeInputs& other) const;
};

struct LayerRecord {
  int layer = 0;
  std::string shard;  // file name inside the partial directory (final shard or staging file)
  std::string shard_sha256;
  std::string carry;         // file name inside resume/ (the carry h_{layer+1}); empty when not saved
  std::string carry_sha256;  // LayerStreamer::carry_sha256() after this layer
  nlohmann::json stats = nlohmann::json::object();     // source tensor -> LinearStats::to_json()
  nlohmann::json cb_slices = nlohmann::json::array();  // CbSlice::to_json() of every CB Linear
  nlohmann::json checks = nlohmann::json::array();     // S4 identity checks of this layer
  nlohmann::json extra = nlohmann::json::object();     // budget mode: candidate options per unit
};

struct Manifest {
  int version = 1;
  ResumeInputs inputs;
  std::vector<LayerRecord> layers;  // finished layers, in order 0, 1, …

  nlohmann::json to_json() const;
  static Expected<Manifest> from_json(const nlohmann::json& j, const std::string& label);
  static Expected<Manifest> read(const std::string& path);
  Status write(const std::string& path) const;  // tmp + rename
};

}  // namespace gridq::quant

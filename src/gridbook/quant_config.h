// quant_config.json and the config.json `quantization_config` stub (format.md §11), parsed strictly and
// emitted deterministically. Parsing validates every "Config" and "Schemes" rule of format.md §15; anything
// gridq does not implement (per_expert_format_groups, activation_contract, source_passthrough, …) is refused
// rather than ignored, because ignoring a key that changes decoding would serve wrong weights.
#pragma once

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gridbook/rung.h"

namespace gridq::gridbook {

// fp4 v2 two-tier scale coding: scale_g = table[c_g] · 2^(E − 127) (format.md §6.2). kind "two_tier",
// sub_bits 4 and super_bias 127 are the only accepted values, so only the table is stored.
struct ScaleCoding {
  std::array<float, 16> table{};
  bool operator==(const ScaleCoding&) const = default;
};
// The default table T4_2oct8m: entry 8i + j = (1 + j/8)·2^i.
ScaleCoding default_scale_coding();

struct CbScheme {
  Rung rung;
  int type_size = 0;
  int n_sub = 0;
  int group_size = 0;                         // 16 fp4, 0 fp8
  int act_bits = 0;                           // 4 fp4, 8 fp8
  std::string codebook_source = "lattice";    // lattice | learned
  std::vector<std::string> codebook_ref;      // sidecar tensor names, sub0 … sub{n_sub-1}
  std::optional<std::string> codebook_group;  // a role name, or null
  std::optional<ScaleCoding> scale_coding;    // fp4 v2 only
  bool operator==(const CbScheme&) const = default;
};

// Fills every derived field of a scheme for `rung` (type_size, n_sub, group_size, act_bits, v2 default
// scale coding) with the lattice book names cb_codebook.lattice.<fmt>.sub{i}.
CbScheme make_cb_scheme(const Rung& rung, std::string codebook_ref_prefix = "cb_codebook.lattice");

struct ConfigGroup {
  std::string name;
  std::vector<std::string> targets;
  std::string format;              // CB: the rung name; compressed-tensors: "float-quantized" or empty
  std::optional<CbScheme> scheme;  // present: codebook group; absent: compressed-tensors FP8 W8A8 (§12)
  bool operator==(const ConfigGroup&) const = default;
};

struct QuantConfig {
  std::string quant_method = "gridbook";  // "prismaquant" is read as an alias; emit always writes gridbook
  std::string format;                     // informational (e.g. "nvfp4_cb")
  int layout_version = 1;
  std::vector<ConfigGroup> groups;  // sorted by name (JSON objects are unordered)
  std::vector<std::string> ignore;
  // provenance.codebook_sha256: absent ⇒ no check; present ⇒ names and digests must match the sidecar.
  std::optional<std::map<std::string, std::string>> codebook_sha256;
  nlohmann::json provenance_extra = nlohmann::json::object();  // codebook_source, tensor_formats, …
  bool operator==(const QuantConfig&) const = default;

  const ConfigGroup* find_group(std::string_view name) const;
};

// Parses quant_config.json (or the inline config of config.json). `label` prefixes error messages.
Expected<QuantConfig> parse_quant_config(const nlohmann::json& j,
                                         std::string_view label = "quant_config.json");
// Emits the JSON gridq writes; layout_version is recomputed from the groups. Deterministic.
nlohmann::json emit_quant_config(const QuantConfig& qc);

// The compressed-tensors FP8_DYNAMIC group body gridq writes and accepts (format.md §12).
nlohmann::json fp8_dynamic_group_body();

// config.json `quantization_config`.
struct QuantizationStub {
  std::string quant_method = "gridbook";
  std::string format;
  std::string config_file = "quant_config.json";
  std::string codebook_file = "cb_codebooks.pqcb";
  std::optional<QuantConfig> inline_config;  // the full config inlined (recognised by config_groups)
};

// Returns nullopt when config.json has no quantization_config (a plain checkpoint); refuses a
// quantization_config that is not gridbook, unknown stub keys and file names that are not plain names.
Expected<std::optional<QuantizationStub>> parse_quantization_stub(const nlohmann::json& config_json);
// The stub gridq writes into config.json (never inline, never "prismaquant").
nlohmann::json emit_quantization_stub(const QuantizationStub& stub);

// A plain file name inside the model directory: non-empty, no path separator, no "..", no NUL.
Status check_plain_file_name(std::string_view name, std::string_view key);

}  // namespace gridq::gridbook

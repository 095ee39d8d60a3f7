// Artifact reader: opens a gridbook artifact directory (or a plain Hugging Face checkpoint) and validates
// everything format.md §15 lists before anything is used — containers, config, schemes, tensors, codebooks,
// provenance, v2 scale legality over every plane, and coverage (every tensor consumed, every Linear claimed
// exactly once). Refusals name the tensor and the rule. The result is a list of modules, each with its
// format, logical shape and on-disk size, used by `gridq inspect` and by the runtime loader.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/components.h"
#include "gridbook/quant_config.h"
#include "gridbook/rung.h"
#include "gridbook/sidecar.h"
#include "io/checkpoint.h"

namespace gridq::gridbook {

enum class WeightFormat {
  kBF16,      // passthrough
  kF16,       // passthrough
  kF32,       // passthrough (e.g. the router correction bias)
  kFP8W8A8,   // compressed-tensors FP8 weight [rows, in] + F32 per-row weight_scale (format.md §12)
  kCodebook,  // gridbook CB: cb_qweight U8 (+ fp8-cb weight_scale) (format.md §9)
};
std::string_view weight_format_name(WeightFormat f);  // "BF16", "F16", "F32", "FP8_W8A8", "CB"

struct ModuleInfo {
  std::string name;  // on-disk module name ("model.layers.1.mlp.experts.gate_up_proj", "lm_head")
  Component component = Component::kOther;
  bool linear = false;  // a Linear (claimed by a group target or ignore)
  WeightFormat format = WeightFormat::kBF16;
  std::optional<Rung> rung;    // kCodebook only
  int group = -1;              // index into QuantConfig::groups for CB / FP8 modules, else -1
  std::vector<int64_t> shape;  // logical weight shape: [rows, in], [E, rows, in] or the parameter's shape
  int64_t params = 0;          // logical weights = product(shape)
  uint64_t bytes = 0;          // on-disk bytes of every tensor the module consumes (scales included)
  std::string weight_tensor;   // the main tensor: <m>.weight, <m>.cb_qweight or the bare parameter
  std::string scale_tensor;    // <m>.weight_scale for FP8 W8A8 and FP8-CB, else empty
  double bpw() const {
    return params > 0 ? static_cast<double>(bytes) * 8.0 / static_cast<double>(params) : 0.0;
  }
  std::string format_label() const;  // rung name for CB (e.g. "NVFP4_CB_K16"), else weight_format_name
  int64_t rows() const { return shape.size() >= 2 ? shape[shape.size() - 2] : 0; }
  int64_t in() const { return shape.size() >= 2 ? shape.back() : 0; }
};

class Artifact {
 public:
  // Opens a gridbook artifact: config.json must carry a gridbook quantization_config.
  static Expected<std::unique_ptr<Artifact>> open(const std::string& dir);
  // Opens an artifact or, when config.json has no quantization_config, a plain checkpoint (every module
  // passthrough). Both are validated against the architecture's module list.
  static Expected<std::unique_ptr<Artifact>> open_any(const std::string& dir);

  bool quantized() const { return quant_.has_value(); }
  const std::string& dir() const { return ckpt_->dir(); }
  const nlohmann::json& config() const { return ckpt_->config(); }
  const QuantConfig* quant_config() const { return quant_ ? &*quant_ : nullptr; }
  const io::Checkpoint& checkpoint() const { return *ckpt_; }
  const Sidecar* sidecar() const { return sidecar_ ? &*sidecar_ : nullptr; }
  const std::vector<ModuleInfo>& modules() const { return modules_; }  // in config order
  const ModuleInfo* find_module(std::string_view name) const;
  // The validated codebook of a CB module (nullptr for other formats).
  const Codebook* codebook(const ModuleInfo& m) const;
  const io::TensorInfo* tensor(std::string_view name) const { return ckpt_->find(name); }
  // What was verified at open, for reports ("codebook provenance: 4 tables verified").
  const std::vector<std::string>& checks() const { return checks_; }

 private:
  Artifact() = default;
  static Expected<std::unique_ptr<Artifact>> open_impl(const std::string& dir, bool require_quantized);
  Status build_modules();

  std::unique_ptr<io::Checkpoint> ckpt_;
  std::optional<QuantizationStub> stub_;
  std::optional<QuantConfig> quant_;
  std::optional<Sidecar> sidecar_;
  std::map<int, Codebook> codebooks_;  // by group index
  std::vector<ModuleInfo> modules_;
  std::vector<std::string> checks_;
};

}  // namespace gridq::gridbook

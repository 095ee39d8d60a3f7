#include "serve/weight_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "gridbook/rung.h"

namespace gridq::serve {
namespace {

std::string label_of(const runtime::QMatrix& m) {
  switch (m.format) {
    case runtime::WeightFormat::kBF16:
      return "BF16";
    case runtime::WeightFormat::kF32:
      return "F32";
    case runtime::WeightFormat::kFP8:
      return "FP8_W8A8";
    case runtime::WeightFormat::kCB:
      return m.rung ? m.rung->name() : "CB";
  }
  return "?";
}

const char* act_contract(int act_bits) {
  switch (act_bits) {
    case 8:
      return "activations FP8 per-token QDQ";
    case 4:
      return "activations FP4 group-16 QDQ";
    default:
      return "fp32 activations";
  }
}

}  // namespace

std::vector<WeightFormatUse> weight_format_uses(const runtime::ModelWeights& w) {
  std::vector<WeightFormatUse> uses;
  auto add = [&](const runtime::QMatrix& m) {
    if (m.rows <= 0) return;  // an absent optional matrix (no gate, no shared expert)
    const std::string label = label_of(m);
    const int act = m.format == runtime::WeightFormat::kFP8 ? 8 : m.act_bits;
    auto it = std::find_if(uses.begin(), uses.end(),
                           [&](const WeightFormatUse& u) { return u.label == label && u.act_bits == act; });
    if (it == uses.end()) it = uses.insert(uses.end(), WeightFormatUse{label, act, 0, 0});
    ++it->matrices;
    it->params += m.rows * m.cols;
  };
  runtime::for_each_matrix(w, add);
  return uses;
}

std::string kernel_line(const WeightFormatUse& u, bool cuda) {
  std::string path;
  if (cuda)
    path =
        u.label == "FP8_W8A8"
            ? "runtime/cuda: tiled W8A8 GEMV (e4m3 tensor cores, per-row weight_scale, bf16 epilogue) or the "
              "reference matvec"
            : "runtime/cuda: tiled tensor-core GEMV (weights decoded in registers, never a dense copy) or "
              "the "
              "reference matvec (kernels/ref_matvec.cu)";
  else if (u.label == "BF16")
    path = "runtime/cpu/matmul.cpp: bf16 rows widened to fp32 (fused row dot at decode), fp32 accumulate";
  else if (u.label == "F32")
    path = "runtime/cpu/matmul.cpp: fp32 rows, fp32 accumulate";
  else if (u.label == "FP8_W8A8")
    path =
        "runtime/cpu/matmul.cpp W8A8: e4m3 rows x FP8 per-token activations, per-row weight_scale, "
        "bf16 epilogue (format.md §12)";
  else
    path =
        "runtime/cpu/cb_rows.cpp: one codebook row decoded into scratch per use (never a dense copy), "
        "fp32 dot";
  return fmt::format("weights {}: {} matrices, {:.2f}M params -> {}; {}", u.label, u.matrices,
                     static_cast<double>(u.params) / 1e6, path, act_contract(u.act_bits));
}

std::string format_label(const std::vector<WeightFormatUse>& uses) {
  std::vector<std::string> labels;
  for (const auto& u : uses)
    if (std::find(labels.begin(), labels.end(), u.label) == labels.end()) labels.push_back(u.label);
  std::sort(labels.begin(), labels.end());
  std::string out;
  for (const auto& l : labels) out += (out.empty() ? "" : "+") + l;
  return out.empty() ? "unknown" : out;
}

}  // namespace gridq::serve

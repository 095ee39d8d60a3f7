#include "runtime/artifact_weights.h"

#include <cstring>
#include <map>

#include "model/loader.h"

namespace gridq::runtime {

namespace {

struct Logical {
  const gridbook::ModuleInfo* module;
};

}  // namespace

Expected<std::shared_ptr<ArtifactModel>> load_artifact_model(const std::string& dir) {
  auto am = std::make_shared<ArtifactModel>();
  GRIDQ_ASSIGN_OR_RETURN(am->artifact, gridbook::Artifact::open_any(dir));
  const gridbook::Artifact& art = *am->artifact;
  // The adapter sees every tensor of the checkpoint, except that each FP8 / CB module's tensors are replaced
  // by one logical BF16 stand-in with the module's logical shape (no data).
  model::TensorTable table = model::tensor_table(art.checkpoint());
  std::map<std::string, const gridbook::ModuleInfo*, std::less<>> quantized;  // stand-in name -> module
  for (const auto& m : art.modules()) {
    if (m.format != gridbook::WeightFormat::kFP8W8A8 && m.format != gridbook::WeightFormat::kCodebook)
      continue;
    table.erase(m.weight_tensor);
    if (!m.scale_tensor.empty()) table.erase(m.scale_tensor);
    const std::string name = m.shape.size() == 3 ? m.name : m.name + ".weight";  // fused stacks are bare
    io::TensorInfo& info = am->logical.emplace_back();
    info.name = name;
    info.dtype = io::DType::BF16;
    info.shape = m.shape;
    info.data = nullptr;
    table[name] = &info;
    quantized[name] = &m;
  }
  GRIDQ_ASSIGN_OR_RETURN(model::Adapted a, model::adapt(art.config(), table));
  ArtifactModel* raw = am.get();
  MatrixResolver resolve = [raw, &art, &quantized](const model::WeightRef& ref) -> Expected<QMatrix> {
    auto it = quantized.find(ref.tensor);
    if (it == quantized.end()) {
      GRIDQ_ASSIGN_OR_RETURN(QMatrix q, qmatrix_from_ref(ref));
      if (q.format == WeightFormat::kBF16 && reinterpret_cast<uintptr_t>(q.data) % alignof(uint16_t) != 0) {
        auto& copy = raw->aligned_bf16.emplace_back(static_cast<size_t>(q.rows * q.cols));
        std::memcpy(copy.data(), q.data, copy.size() * sizeof(uint16_t));
        q.data = copy.data();
      }
      if (q.format == WeightFormat::kF32 && reinterpret_cast<uintptr_t>(q.data) % alignof(float) != 0)
        return err("tensor '{}': F32 data is not 4-byte aligned", ref.tensor);
      return q;
    }
    const gridbook::ModuleInfo& m = *it->second;
    const io::TensorInfo* wt = art.tensor(m.weight_tensor);
    if (!wt) return err("artifact: module '{}' lost its tensor '{}'", m.name, m.weight_tensor);
    const int64_t rows_total = m.rows();
    const int64_t first_row = (ref.expert >= 0 ? ref.expert * rows_total : 0) + ref.row0;
    QMatrix q;
    q.rows = ref.rows;
    q.cols = ref.cols;
    if (!m.scale_tensor.empty()) {
      const io::TensorInfo* st = art.tensor(m.scale_tensor);
      if (!st || st->dtype != io::DType::F32)
        return err("artifact: module '{}' needs F32 '{}'", m.name, m.scale_tensor);
      auto& s = raw->scales.emplace_back(static_cast<size_t>(ref.rows));
      std::memcpy(s.data(), st->data + first_row * 4, s.size() * sizeof(float));
      q.row_scale = s.data();
    }
    if (m.format == gridbook::WeightFormat::kFP8W8A8) {
      if (wt->dtype != io::DType::F8_E4M3) return err("artifact: '{}' is not F8_E4M3", m.weight_tensor);
      q.format = WeightFormat::kFP8;
      q.act_bits = 8;
      q.data = wt->data + first_row * ref.cols;
      return q;
    }
    if (!m.rung || !art.codebook(m)) return err("artifact: CB module '{}' has no rung or codebook", m.name);
    const auto* qc = art.quant_config();
    if (!qc || m.group < 0 || static_cast<size_t>(m.group) >= qc->groups.size() ||
        !qc->groups[static_cast<size_t>(m.group)].scheme)
      return err("artifact: CB module '{}' has no scheme", m.name);
    q.format = WeightFormat::kCB;
    q.rung = &*m.rung;
    q.codebook = art.codebook(m);
    q.act_bits = qc->groups[static_cast<size_t>(m.group)].scheme->act_bits;
    q.row_bytes = gridbook::row_bytes(*m.rung, ref.cols);
    q.data = wt->data + first_row * q.row_bytes;
    return q;
  };
  GRIDQ_ASSIGN_OR_RETURN(am->weights, build_model_weights(a.spec, a.weights, resolve));
  am->spec = std::move(a.spec);
  return am;
}

Expected<int64_t> set_activation_contract(ModelWeights& w, const std::string& contract) {
  if (!contract.empty() && contract != "w4a4" && contract != "w4a16")
    return err("activation contract '{}': expected w4a4 or w4a16", contract);
  const int bits = contract == "w4a16" ? 16 : 4;
  int64_t n = 0;
  auto set = [&](QMatrix& m) {
    if (m.format != WeightFormat::kCB || !m.rung || m.rung->grid != gridbook::Grid::FP4) return;
    ++n;
    if (!contract.empty()) m.act_bits = bits;
  };
  for_each_matrix(w, set);
  return n;
}

}  // namespace gridq::runtime

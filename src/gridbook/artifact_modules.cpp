// Per-module checks of an artifact's tensors (artifact_detail.h), for Artifact::build_modules.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gridbook/artifact_detail.h"
#include "gridbook/scale_coding.h"

namespace gridq::gridbook::artifact_detail {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Expected<WeightFormat> passthrough_format(const TensorInfo& t) {
  switch (t.dtype) {
    case DType::BF16:
      return WeightFormat::kBF16;
    case DType::F16:
      return WeightFormat::kF16;
    case DType::F32:
      return WeightFormat::kF32;
    default:
      return err(
          "tensor '{}': dtype {} is not a passthrough dtype (BF16, F16, F32) and no config group "
          "quantizes it",
          t.name, io::dtype_name(t.dtype));
  }
}

// F32 values of a tensor (the mapping may not be 4-byte aligned, so copy rather than cast).
std::vector<float> read_f32(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

Status check_positive_scales(const TensorInfo& t) {
  const std::vector<float> s = read_f32(t);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isfinite(s[i]) || !(s[i] > 0.0f)) {
      return err("tensor '{}': weight_scale[{}] = {} must be finite and > 0 (format.md §15 Tensors)", t.name,
                 i, s[i]);
    }
  }
  return Status();
}

bool shape_is(const TensorInfo& t, const std::vector<int64_t>& s) { return t.shape == s; }

std::vector<int64_t> with_last(std::vector<int64_t> s, int64_t last) {
  s.back() = last;
  return s;
}

Status refuse_extra(const ModuleTensors& mt, const ModuleInfo& m, std::string_view role,
                    std::initializer_list<const TensorInfo*> allowed) {
  for (const TensorInfo* t : mt.all()) {
    if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) {
      return err(
          "tensor '{}': module '{}' is {}, which does not use this tensor (unconsumed tensor; "
          "format.md §15)",
          t->name, m.name, role);
    }
  }
  return Status();
}

Status codebook_module(const ModuleSpec& sp, const ModuleTensors& mt, const ConfigGroup& grp, int group,
                       ModuleInfo& m, uint64_t& planes_checked) {
  const CbScheme& s = *grp.scheme;
  m.format = WeightFormat::kCodebook;
  m.rung = s.rung;
  m.group = group;
  const int64_t in = sp.in();
  if (in % kSuperblock != 0) {
    return err(
        "module '{}': in_features {} is not a multiple of 256, so it cannot be a codebook target of "
        "group '{}' (format.md §4: list it in ignore)",
        m.name, in, grp.name);
  }
  auto re = parse_routed_expert(sp.name);
  if (re && re->expert) {
    return err(
        "module '{}': routed experts must be stored stacked ('{}.{}') to be codebook targets "
        "(format.md §9)",
        m.name, re->experts_prefix, re->leaf == "down_proj" ? "down_proj" : "gate_up_proj");
  }
  const TensorInfo* q = mt.cb_qweight;
  if (!q)
    return err("module '{}': codebook target of group '{}' has no '{}.cb_qweight' tensor", m.name, grp.name,
               m.name);
  const std::vector<int64_t> want = with_last(sp.shape, in / kSuperblock * s.type_size);
  if (q->dtype != DType::U8 || !shape_is(*q, want)) {
    return err("tensor '{}': {} {} but {} type_size {} needs U8 {} (format.md §9, §15 Tensors)", q->name,
               io::dtype_name(q->dtype), shape_str(q->shape), s.rung.name(), s.type_size, shape_str(want));
  }
  GRIDQ_RETURN_IF_ERROR(check_scale_planes(s.rung, q->bytes(), q->name));
  if (s.rung.grid == Grid::FP4) planes_checked += static_cast<uint64_t>(q->nbytes() / s.type_size);
  m.weight_tensor = q->name;
  m.bytes = q->nbytes();
  if (s.rung.grid == Grid::FP8) {
    const TensorInfo* ws = mt.weight_scale;
    const std::vector<int64_t> want_s(sp.shape.begin(), sp.shape.end() - 1);
    if (!ws)
      return err("module '{}': FP8-CB target has no '{}.weight_scale' tensor (format.md §9)", m.name, m.name);
    if (ws->dtype != DType::F32 || !shape_is(*ws, want_s)) {
      return err("tensor '{}': {} {} but FP8-CB needs F32 {} (format.md §9)", ws->name,
                 io::dtype_name(ws->dtype), shape_str(ws->shape), shape_str(want_s));
    }
    GRIDQ_RETURN_IF_ERROR(check_positive_scales(*ws));
    m.scale_tensor = ws->name;
    m.bytes += ws->nbytes();
    GRIDQ_RETURN_IF_ERROR(refuse_extra(mt, m, claim_kind_name(ClaimKind::kCodebook), {q, ws}));
  } else {
    GRIDQ_RETURN_IF_ERROR(refuse_extra(mt, m, claim_kind_name(ClaimKind::kCodebook), {q}));
  }
  return Status();
}

Status fp8_module(const ModuleSpec& sp, const ModuleTensors& mt, int group, ModuleInfo& m) {
  m.format = WeightFormat::kFP8W8A8;
  m.group = group;
  const TensorInfo* w = sp.bare ? mt.bare : mt.weight;
  const TensorInfo* ws = mt.weight_scale;
  if (!w)
    return err("module '{}': compressed-tensors FP8 target has no weight tensor (format.md §12)", m.name);
  if (w->dtype != DType::F8_E4M3 || !shape_is(*w, sp.shape)) {
    return err("tensor '{}': {} {} but compressed-tensors FP8 needs F8_E4M3 {} (format.md §12)", w->name,
               io::dtype_name(w->dtype), shape_str(w->shape), shape_str(sp.shape));
  }
  if (!ws)
    return err("module '{}': compressed-tensors FP8 target has no '{}.weight_scale' (format.md §12)", m.name,
               m.name);
  const std::vector<int64_t> rows_1 = with_last(sp.shape, 1);
  const std::vector<int64_t> rows_only(sp.shape.begin(), sp.shape.end() - 1);
  if (ws->dtype != DType::F32 || !(shape_is(*ws, rows_1) || shape_is(*ws, rows_only))) {
    return err("tensor '{}': {} {} but compressed-tensors FP8 needs F32 {} (or {}) (format.md §12)", ws->name,
               io::dtype_name(ws->dtype), shape_str(ws->shape), shape_str(rows_1), shape_str(rows_only));
  }
  GRIDQ_RETURN_IF_ERROR(check_positive_scales(*ws));
  const auto wb = w->bytes();
  for (size_t i = 0; i < wb.size(); ++i) {
    if ((wb[i] & 0x7F) == 0x7F) {
      return err("tensor '{}': byte {} is an E4M3 NaN (0x{:02X}); weights must be finite", w->name, i, wb[i]);
    }
  }
  m.weight_tensor = w->name;
  m.scale_tensor = ws->name;
  m.bytes = w->nbytes() + ws->nbytes();
  GRIDQ_RETURN_IF_ERROR(refuse_extra(mt, m, claim_kind_name(ClaimKind::kCompressedTensors), {w, ws}));
  return Status();
}

Status passthrough_module(const ModuleSpec& sp, const ModuleTensors& mt, std::string_view role,
                          ModuleInfo& m) {
  // Passthrough: an ignored Linear, a plain checkpoint, or a non-Linear parameter.
  const TensorInfo* w = sp.bare ? mt.bare : mt.weight;
  if (!w) {
    return err("module '{}': missing passthrough tensor '{}' (format.md §15 Coverage)", m.name,
               sp.bare ? m.name : m.name + ".weight");
  }
  GRIDQ_ASSIGN_OR_RETURN(m.format, passthrough_format(*w));
  if (!shape_is(*w, sp.shape) && !(sp.alt_shape.size() && shape_is(*w, sp.alt_shape))) {
    return err("tensor '{}': shape {} but the config implies {}{} (laguna.md §4)", w->name,
               shape_str(w->shape), shape_str(sp.shape),
               sp.alt_shape.empty() ? "" : " or " + shape_str(sp.alt_shape));
  }
  m.shape = w->shape;
  m.weight_tensor = w->name;
  m.bytes = w->nbytes();
  GRIDQ_RETURN_IF_ERROR(refuse_extra(mt, m, role, {w}));
  return Status();
}

}  // namespace gridq::gridbook::artifact_detail

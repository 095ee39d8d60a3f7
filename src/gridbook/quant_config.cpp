#include "gridbook/quant_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/numerics.h"

namespace gridq::gridbook {

using nlohmann::json;

namespace {

// Keys that would change how tensors decode or which modules exist; gridq does not implement them.
constexpr std::array<std::string_view, 6> kRefusedTopLevel = {
    "per_expert_format_groups", "source_passthrough", "execution_contracts",
    "dspark_target_bridge",     "embedding_formats",  "embeddings"};
// Keys that carry no decoding meaning when null/empty (compressed-tensors writes some of them).
constexpr std::array<std::string_view, 3> kNullOnlyTopLevel = {"kv_cache_scheme", "sparsity_config",
                                                               "transform_config"};
constexpr std::array<std::string_view, 3> kInformationalTopLevel = {"quantization_status",
                                                                    "global_compression_ratio", "version"};

template <size_t N>
bool in(const std::array<std::string_view, N>& set, std::string_view s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

bool is_empty_value(const json& v) { return v.is_null() || (v.is_object() && v.empty()); }

Expected<int> get_int_key(const json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end()) return err("{}: missing '{}'", where, key);
  if (!it->is_number_integer()) return err("{}: '{}' must be an integer", where, key);
  const int64_t v = it->get<int64_t>();
  if (v < -1000000 || v > 1000000) return err("{}: '{}' = {} out of range", where, key, v);
  return static_cast<int>(v);
}

Expected<std::string> get_str_key(const json& obj, const char* key, std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end()) return err("{}: missing '{}'", where, key);
  if (!it->is_string()) return err("{}: '{}' must be a string", where, key);
  return it->get<std::string>();
}

bool is_exact_e4m3(double v) {
  if (!std::isfinite(v)) return false;
  const float f = static_cast<float>(v);
  if (static_cast<double>(f) != v) return false;
  if (std::fabs(f) > 448.0f) return false;
  return e4m3_to_f32(f32_to_e4m3_rne(f)) == f;
}

Expected<ScaleCoding> parse_scale_coding(const json& sc, std::string_view where) {
  if (!sc.is_object()) return err("{}: scale_coding must be an object", where);
  for (auto it = sc.begin(); it != sc.end(); ++it) {
    if (it.key() != "kind" && it.key() != "sub_bits" && it.key() != "super_bias" && it.key() != "table") {
      return err("{}: scale_coding key '{}' is not supported", where, it.key());
    }
  }
  GRIDQ_ASSIGN_OR_RETURN(const std::string kind, get_str_key(sc, "kind", where));
  if (kind != "two_tier") {
    return err(
        "{}: scale_coding.kind '{}' is unknown; only \"two_tier\" is defined (format.md §11.2: an unknown "
        "kind MUST be refused)",
        where, kind);
  }
  GRIDQ_ASSIGN_OR_RETURN(const int sub_bits, get_int_key(sc, "sub_bits", where));
  if (sub_bits != 4) return err("{}: scale_coding.sub_bits {} must be 4", where, sub_bits);
  GRIDQ_ASSIGN_OR_RETURN(const int super_bias, get_int_key(sc, "super_bias", where));
  if (super_bias != 127) return err("{}: scale_coding.super_bias {} must be 127", where, super_bias);
  auto t = sc.find("table");
  if (t == sc.end() || !t->is_array() || t->size() != 16) {
    return err("{}: scale_coding.table must be an array of 16 numbers", where);
  }
  ScaleCoding out;
  for (size_t i = 0; i < 16; ++i) {
    const json& v = (*t)[i];
    if (!v.is_number()) return err("{}: scale_coding.table[{}] is not a number", where, i);
    const double d = v.get<double>();
    if (!(d > 0)) return err("{}: scale_coding.table[{}] = {} must be positive", where, i, d);
    if (!is_exact_e4m3(d))
      return err("{}: scale_coding.table[{}] = {} is not an exact E4M3 value", where, i, d);
    out.table[i] = static_cast<float>(d);
  }
  return out;
}

Expected<CbScheme> parse_scheme(const json& s, const std::string& format, std::string_view where) {
  static const std::set<std::string> kKeys = {
      "grid",         "mode",           "k",           "superblock", "group_size",
      "vec_dim",      "n_sub",          "type_size",   "act_bits",   "codebook_source",
      "codebook_ref", "codebook_group", "scale_coding"};
  if (!s.is_object()) return err("{}: scheme must be an object", where);
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it.key() == "activation_contract") {
      return err("{}: scheme.activation_contract is not supported by gridq (format.md §11.2)", where);
    }
    if (!kKeys.count(it.key())) return err("{}: scheme key '{}' is not supported", where, it.key());
  }
  GRIDQ_ASSIGN_OR_RETURN(const std::string grid, get_str_key(s, "grid", where));
  GRIDQ_ASSIGN_OR_RETURN(const std::string mode, get_str_key(s, "mode", where));
  GRIDQ_ASSIGN_OR_RETURN(const int k, get_int_key(s, "k", where));
  if (grid != "fp4" && grid != "fp8") return err("{}: scheme.grid '{}' must be fp4 or fp8", where, grid);
  if (mode != "product" && mode != "signed" && mode != "full") {
    return err("{}: scheme.mode '{}' must be product, signed or full", where, mode);
  }
  CbScheme out;
  if (auto sc = s.find("scale_coding"); sc != s.end()) {
    if (grid != "fp4") return err("{}: scale_coding is only defined for the fp4 grid", where);
    GRIDQ_ASSIGN_OR_RETURN(out.scale_coding, parse_scale_coding(*sc, where));
  }
  const int layout = out.scale_coding ? 2 : 1;
  GRIDQ_ASSIGN_OR_RETURN(out.rung, parse_rung_name(format, layout));
  const Grid g = grid == "fp4" ? Grid::FP4 : Grid::FP8;
  const Mode m = mode == "product" ? Mode::Product : mode == "signed" ? Mode::Signed : Mode::Full;
  if (out.rung.grid != g || out.rung.mode != m || out.rung.k != k) {
    return err("{}: format '{}' disagrees with scheme grid {} / mode {} / k {} (format.md §15 Schemes)",
               where, format, grid, mode, k);
  }
  GRIDQ_RETURN_IF_ERROR(validate_rung(out.rung));
  const bool fp4 = g == Grid::FP4;
  GRIDQ_ASSIGN_OR_RETURN(const int superblock, get_int_key(s, "superblock", where));
  if (superblock != kSuperblock) return err("{}: scheme.superblock {} must be 256", where, superblock);
  GRIDQ_ASSIGN_OR_RETURN(const int vec_dim, get_int_key(s, "vec_dim", where));
  if (vec_dim != kVecDim) return err("{}: scheme.vec_dim {} must be 8", where, vec_dim);
  GRIDQ_ASSIGN_OR_RETURN(out.group_size, get_int_key(s, "group_size", where));
  if (out.group_size != (fp4 ? 16 : 0)) {
    return err("{}: scheme.group_size {} must be {} for grid {}", where, out.group_size, fp4 ? 16 : 0, grid);
  }
  GRIDQ_ASSIGN_OR_RETURN(out.n_sub, get_int_key(s, "n_sub", where));
  if (out.n_sub != out.rung.n_sub()) {
    return err("{}: scheme.n_sub {} must be {} for {}", where, out.n_sub, out.rung.n_sub(), format);
  }
  GRIDQ_ASSIGN_OR_RETURN(out.act_bits, get_int_key(s, "act_bits", where));
  if (out.act_bits != (fp4 ? 4 : 8)) {
    return err("{}: scheme.act_bits {} must be {} for grid {}", where, out.act_bits, fp4 ? 4 : 8, grid);
  }
  GRIDQ_ASSIGN_OR_RETURN(out.type_size, get_int_key(s, "type_size", where));
  if (out.type_size != out.rung.type_size()) {
    return err("{}: scheme.type_size {} is not {} = 4k + {} for {} layout v{} (format.md §4)", where,
               out.type_size, out.rung.type_size(), out.rung.plane_bytes(), format, out.rung.layout_version);
  }
  GRIDQ_ASSIGN_OR_RETURN(out.codebook_source, get_str_key(s, "codebook_source", where));
  if (out.codebook_source != "lattice" && out.codebook_source != "learned") {
    return err("{}: scheme.codebook_source '{}' must be lattice or learned", where, out.codebook_source);
  }
  auto ref = s.find("codebook_ref");
  if (ref == s.end()) return err("{}: missing 'codebook_ref'", where);
  if (ref->is_string()) {
    out.codebook_ref.push_back(ref->get<std::string>());
  } else if (ref->is_array()) {
    for (const auto& r : *ref) {
      if (!r.is_string() || r.get<std::string>().empty()) {
        return err("{}: codebook_ref entries must be non-empty strings", where);
      }
      out.codebook_ref.push_back(r.get<std::string>());
    }
  } else {
    return err("{}: codebook_ref must be a string or a list of strings", where);
  }
  if (static_cast<int>(out.codebook_ref.size()) != out.n_sub) {
    return err("{}: codebook_ref lists {} tables but n_sub is {} (format.md §15 Schemes)", where,
               out.codebook_ref.size(), out.n_sub);
  }
  auto cg = s.find("codebook_group");
  if (cg != s.end() && !cg->is_null()) {
    if (!cg->is_string()) return err("{}: codebook_group must be a string or null", where);
    out.codebook_group = cg->get<std::string>();
  }
  return out;
}

// compressed-tensors FP8_DYNAMIC (format.md §12): the only non-scheme group gridq serves.
Status check_quant_args(const json& a, std::string_view where, std::string_view which, const char* strategy,
                        bool dynamic) {
  if (!a.is_object()) return err("{}: '{}' must be an object", where, which);
  static const std::set<std::string> kOptional = {
      "group_size", "block_structure", "actorder", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"};
  for (auto it = a.begin(); it != a.end(); ++it) {
    const std::string& k = it.key();
    if (k == "num_bits" || k == "type" || k == "strategy" || k == "symmetric" || k == "dynamic") continue;
    if (!kOptional.count(k)) return err("{}: {}.{} is not supported", where, which, k);
    if ((k == "group_size" || k == "block_structure" || k == "actorder" || k == "scale_dtype" ||
         k == "zp_dtype") &&
        !it->is_null()) {
      return err("{}: {}.{} must be null for FP8_DYNAMIC", where, which, k);
    }
  }
  auto want = [&](const char* key, const json& v) -> Status {
    auto it = a.find(key);
    if (it == a.end() || *it != v) {
      return err("{}: {}.{} must be {} (compressed-tensors FP8_DYNAMIC, format.md §12)", where, which, key,
                 v.dump());
    }
    return Status();
  };
  GRIDQ_RETURN_IF_ERROR(want("num_bits", 8));
  GRIDQ_RETURN_IF_ERROR(want("type", "float"));
  GRIDQ_RETURN_IF_ERROR(want("strategy", strategy));
  GRIDQ_RETURN_IF_ERROR(want("symmetric", true));
  GRIDQ_RETURN_IF_ERROR(want("dynamic", dynamic));
  return Status();
}

Status check_ct_group(const json& g, std::string_view where) {
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::string& k = it.key();
    if (k == "targets" || k == "format" || k == "weights" || k == "input_activations") continue;
    if (k == "output_activations" && it->is_null()) continue;
    return err("{}: key '{}' is not supported in a compressed-tensors group", where, k);
  }
  if (auto f = g.find("format"); f != g.end() && *f != "float-quantized") {
    return err("{}: compressed-tensors format {} is not supported (float-quantized only)", where, f->dump());
  }
  if (!g.contains("weights")) return err("{}: compressed-tensors group without 'weights'", where);
  if (!g.contains("input_activations"))
    return err("{}: compressed-tensors group without 'input_activations'", where);
  GRIDQ_RETURN_IF_ERROR(check_quant_args(g["weights"], where, "weights", "channel", false));
  GRIDQ_RETURN_IF_ERROR(check_quant_args(g["input_activations"], where, "input_activations", "token", true));
  return Status();
}

json scheme_to_json(const CbScheme& s) {
  json j;
  j["grid"] = s.rung.grid == Grid::FP4 ? "fp4" : "fp8";
  j["mode"] = s.rung.mode == Mode::Product ? "product" : s.rung.mode == Mode::Signed ? "signed" : "full";
  j["k"] = s.rung.k;
  j["superblock"] = kSuperblock;
  j["group_size"] = s.group_size;
  j["vec_dim"] = kVecDim;
  j["n_sub"] = s.n_sub;
  j["type_size"] = s.type_size;
  j["act_bits"] = s.act_bits;
  j["codebook_source"] = s.codebook_source;
  j["codebook_group"] = s.codebook_group ? json(*s.codebook_group) : json(nullptr);
  j["codebook_ref"] = s.codebook_ref;
  if (s.scale_coding) {
    json t = json::array();
    for (float v : s.scale_coding->table) t.push_back(static_cast<double>(v));
    j["scale_coding"] = {{"kind", "two_tier"}, {"sub_bits", 4}, {"super_bias", 127}, {"table", t}};
  }
  return j;
}

}  // namespace

ScaleCoding default_scale_coding() {
  ScaleCoding sc;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 8; ++j)
      sc.table[8 * i + j] = (1.0f + static_cast<float>(j) / 8.0f) * static_cast<float>(1 << i);
  }
  return sc;
}

CbScheme make_cb_scheme(const Rung& rung, std::string prefix) {
  CbScheme s;
  s.rung = rung;
  s.type_size = rung.type_size();
  s.n_sub = rung.n_sub();
  const bool fp4 = rung.grid == Grid::FP4;
  s.group_size = fp4 ? 16 : 0;
  s.act_bits = fp4 ? 4 : 8;
  if (fp4 && rung.layout_version == 2) s.scale_coding = default_scale_coding();
  for (int i = 0; i < s.n_sub; ++i)
    s.codebook_ref.push_back(fmt::format("{}.{}.sub{}", prefix, rung.name(), i));
  return s;
}

const ConfigGroup* QuantConfig::find_group(std::string_view name) const {
  for (const auto& g : groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

json fp8_dynamic_group_body() {
  return json{
      {"format", "float-quantized"},
      {"weights",
       {{"num_bits", 8},
        {"type", "float"},
        {"strategy", "channel"},
        {"symmetric", true},
        {"dynamic", false}}},
      {"input_activations",
       {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true}, {"dynamic", true}}}};
}

Expected<QuantConfig> parse_quant_config(const json& j, std::string_view label) {
  if (!j.is_object()) return err("{}: not a JSON object", label);
  QuantConfig qc;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "quant_method" || k == "format" || k == "layout_version" || k == "config_groups" ||
        k == "ignore" || k == "provenance") {
      continue;
    }
    if (in(kRefusedTopLevel, k)) {
      return err("{}: '{}' is not supported by gridq (format.md §11.2); refusing rather than ignoring it",
                 label, k);
    }
    if (in(kNullOnlyTopLevel, k)) {
      if (!is_empty_value(*it))
        return err("{}: '{}' must be null or empty; gridq does not implement it", label, k);
      continue;
    }
    if (in(kInformationalTopLevel, k)) continue;
    return err("{}: unknown key '{}' (gridq refuses keys it cannot interpret, format.md §15 Config)", label,
               k);
  }
  GRIDQ_ASSIGN_OR_RETURN(qc.quant_method, get_str_key(j, "quant_method", label));
  if (qc.quant_method != "gridbook" && qc.quant_method != "prismaquant") {
    return err("{}: quant_method '{}' must be gridbook (or the legacy alias prismaquant)", label,
               qc.quant_method);
  }
  if (auto f = j.find("format"); f != j.end()) {
    if (!f->is_string()) return err("{}: 'format' must be a string", label);
    qc.format = f->get<std::string>();
  }
  int declared_layout = 1;
  if (j.contains("layout_version")) {
    GRIDQ_ASSIGN_OR_RETURN(declared_layout, get_int_key(j, "layout_version", label));
    if (declared_layout != 1 && declared_layout != 2) {
      return err("{}: layout_version {} must be 1 or 2", label, declared_layout);
    }
  }
  auto groups = j.find("config_groups");
  if (groups == j.end() || !groups->is_object() || groups->empty()) {
    return err("{}: config_groups must be a non-empty object", label);
  }
  bool any_v2 = false;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string where = fmt::format("{}: group '{}'", label, it.key());
    const json& g = *it;
    if (!g.is_object()) return err("{}: must be an object", where);
    ConfigGroup cg;
    cg.name = it.key();
    auto t = g.find("targets");
    if (t == g.end() || !t->is_array() || t->empty())
      return err("{}: targets must be a non-empty list", where);
    for (const auto& e : *t) {
      if (!e.is_string() || e.get<std::string>().empty())
        return err("{}: targets must be non-empty strings", where);
      cg.targets.push_back(e.get<std::string>());
    }
    if (auto f = g.find("format"); f != g.end()) {
      if (!f->is_string()) return err("{}: 'format' must be a string", where);
      cg.format = f->get<std::string>();
    }
    if (auto s = g.find("scheme"); s != g.end()) {
      for (auto k = g.begin(); k != g.end(); ++k) {
        if (k.key() != "targets" && k.key() != "format" && k.key() != "scheme") {
          return err("{}: key '{}' is not supported in a codebook group", where, k.key());
        }
      }
      if (cg.format.empty()) return err("{}: codebook group without 'format'", where);
      GRIDQ_ASSIGN_OR_RETURN(cg.scheme, parse_scheme(*s, cg.format, where));
      any_v2 = any_v2 || cg.scheme->scale_coding.has_value();
    } else {
      GRIDQ_RETURN_IF_ERROR(check_ct_group(g, where));
    }
    qc.groups.push_back(std::move(cg));
  }
  if (declared_layout != (any_v2 ? 2 : 1)) {
    return err(
        "{}: layout_version {} is inconsistent with the groups ({} group carries scale_coding; "
        "format.md §11.2: 2 iff some group does)",
        label, declared_layout, any_v2 ? "a" : "no");
  }
  qc.layout_version = declared_layout;
  if (auto ig = j.find("ignore"); ig != j.end() && !ig->is_null()) {
    if (!ig->is_array()) return err("{}: ignore must be a list", label);
    for (const auto& e : *ig) {
      if (!e.is_string() || e.get<std::string>().empty())
        return err("{}: ignore entries must be non-empty strings", label);
      qc.ignore.push_back(e.get<std::string>());
    }
  }
  if (auto pv = j.find("provenance"); pv != j.end() && !pv->is_null()) {
    if (!pv->is_object()) return err("{}: provenance must be an object", label);
    for (auto it = pv->begin(); it != pv->end(); ++it) {
      if (it.key() != "codebook_sha256") {
        qc.provenance_extra[it.key()] = *it;
        continue;
      }
      const json& m = *it;
      if (m.is_null()) return err("{}: provenance.codebook_sha256 is null (format.md §10: refuse)", label);
      if (!m.is_object()) return err("{}: provenance.codebook_sha256 must be an object", label);
      if (m.empty()) return err("{}: provenance.codebook_sha256 is empty (format.md §10: refuse)", label);
      std::map<std::string, std::string> digests;
      for (auto d = m.begin(); d != m.end(); ++d) {
        if (!d->is_string())
          return err("{}: provenance.codebook_sha256['{}'] must be a string", label, d.key());
        const std::string hex = d->get<std::string>();
        const bool ok = hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
                          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                        });
        if (!ok)
          return err("{}: provenance.codebook_sha256['{}'] is not 64 lowercase hex digits", label, d.key());
        digests[d.key()] = hex;
      }
      qc.codebook_sha256 = std::move(digests);
    }
  }
  return qc;
}

json emit_quant_config(const QuantConfig& qc) {
  json j;
  j["quant_method"] = "gridbook";
  if (!qc.format.empty()) j["format"] = qc.format;
  bool any_v2 = false;
  json groups = json::object();
  for (const auto& g : qc.groups) {
    json body;
    if (g.scheme) {
      body["format"] = g.format;
      body["scheme"] = scheme_to_json(*g.scheme);
      any_v2 = any_v2 || g.scheme->scale_coding.has_value();
    } else {
      body = fp8_dynamic_group_body();
      if (!g.format.empty()) body["format"] = g.format;
    }
    body["targets"] = g.targets;
    groups[g.name] = std::move(body);
  }
  j["layout_version"] = any_v2 ? 2 : 1;
  j["config_groups"] = std::move(groups);
  j["ignore"] = qc.ignore;
  json prov = qc.provenance_extra.is_object() ? qc.provenance_extra : json::object();
  if (qc.codebook_sha256) prov["codebook_sha256"] = *qc.codebook_sha256;
  if (!prov.empty()) j["provenance"] = std::move(prov);
  return j;
}

Status check_plain_file_name(std::string_view name, std::string_view key) {
  if (name.empty()) return err("config.json: quantization_config.{} is empty", key);
  if (name.find('/') != std::string_view::npos || name.find('\\') != std::string_view::npos ||
      name.find("..") != std::string_view::npos || name.find('\0') != std::string_view::npos || name == ".") {
    return err(
        "config.json: quantization_config.{} '{}' must be a plain file name inside the model directory "
        "(format.md §11.1)",
        key, name);
  }
  return Status();
}

Expected<std::optional<QuantizationStub>> parse_quantization_stub(const json& config_json) {
  if (!config_json.is_object()) return err("config.json: not a JSON object");
  auto q = config_json.find("quantization_config");
  if (q == config_json.end() || q->is_null()) return std::optional<QuantizationStub>();
  if (!q->is_object()) return err("config.json: quantization_config must be an object");
  QuantizationStub stub;
  GRIDQ_ASSIGN_OR_RETURN(stub.quant_method,
                         get_str_key(*q, "quant_method", "config.json: quantization_config"));
  if (stub.quant_method != "gridbook" && stub.quant_method != "prismaquant") {
    return err(
        "config.json: quantization_config.quant_method '{}' is not gridbook (gridq reads gridbook "
        "artifacts only)",
        stub.quant_method);
  }
  for (const char* key : {"config_file", "codebook_file"}) {
    if (auto f = q->find(key); f != q->end()) {
      if (!f->is_string()) return err("config.json: quantization_config.{} must be a string", key);
      GRIDQ_RETURN_IF_ERROR(check_plain_file_name(f->get<std::string>(), key));
      (std::string_view(key) == "config_file" ? stub.config_file : stub.codebook_file) =
          f->get<std::string>();
    }
  }
  if (auto f = q->find("format"); f != q->end()) {
    if (!f->is_string()) return err("config.json: quantization_config.format must be a string");
    stub.format = f->get<std::string>();
  }
  if (q->contains("config_groups")) {
    json inline_cfg = *q;
    inline_cfg.erase("config_file");
    inline_cfg.erase("codebook_file");
    GRIDQ_ASSIGN_OR_RETURN(auto qc, parse_quant_config(inline_cfg, "config.json: quantization_config"));
    stub.inline_config = std::move(qc);
    return std::optional<QuantizationStub>(std::move(stub));
  }
  for (auto it = q->begin(); it != q->end(); ++it) {
    const std::string& k = it.key();
    if (k != "quant_method" && k != "format" && k != "config_file" && k != "codebook_file") {
      return err(
          "config.json: quantization_config key '{}' is not part of the gridbook stub (format.md §11.1)", k);
    }
  }
  return std::optional<QuantizationStub>(std::move(stub));
}

json emit_quantization_stub(const QuantizationStub& stub) {
  json j{
      {"quant_method", "gridbook"}, {"config_file", stub.config_file}, {"codebook_file", stub.codebook_file}};
  if (!stub.format.empty()) j["format"] = stub.format;
  return j;
}

}  // namespace gridq::gridbook

#include "gridbook/quant_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "gridbook/quant_config_detail.h"

namespace gridq::gridbook {

using nlohmann::json;

using quant_config_detail::get_int_key;
using quant_config_detail::get_str_key;
using quant_config_detail::parse_scheme;
using quant_config_detail::scheme_to_json;

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

}  // namespace

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

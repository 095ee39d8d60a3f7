// The NVFP4-CB / FP8-CB scheme of a config group (format.md §11): parsed from and written to JSON, and the
// defaults the quantizer writes (quant_config.cpp parses the rest of the file).
#include <cmath>
#include <set>

#include "core/numerics.h"
#include "gridbook/quant_config_detail.h"

namespace gridq::gridbook {

using nlohmann::json;
using quant_config_detail::get_int_key;
using quant_config_detail::get_str_key;

namespace {

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

}  // namespace

namespace quant_config_detail {

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

}  // namespace quant_config_detail

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

}  // namespace gridq::gridbook

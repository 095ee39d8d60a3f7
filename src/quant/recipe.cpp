// Recipe files: the strict JSON parser, preset lookup and the format helpers (recipe.h). Every key is
// known, typed and range-checked; anything else is refused with the key's path ("rules[2].codebook"), because
// a silently ignored key would quantize differently from what the file says.
#include "quant/recipe.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "io/json_strict.h"
#include "io/sha256.h"
#include "quant/recipe_regex.h"

namespace gridq::quant {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Reads the keys of one JSON object, refusing unknown ones at the end (check_unknown).
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, const std::string& label)
      : j_(j), path_(std::move(path)), label_(label) {}

  Status require_object() const {
    if (!j_.is_object()) return err("{}: {} must be a JSON object", label_, where());
    return Status();
  }
  bool has(const char* key) {
    seen_.insert(key);
    return j_.contains(key);
  }
  std::string key_path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& at(const char* key) const { return j_.at(key); }

  Status get_string(const char* key, std::string* out, bool required) {
    if (!has(key)) return missing(key, required);
    const json& v = j_.at(key);
    if (!v.is_string()) return err("{}: {} must be a string", label_, key_path(key));
    *out = v.get<std::string>();
    return Status();
  }
  Status get_bool(const char* key, bool* out) {
    if (!has(key)) return Status();
    const json& v = j_.at(key);
    if (!v.is_boolean()) return err("{}: {} must be true or false", label_, key_path(key));
    *out = v.get<bool>();
    return Status();
  }
  Status get_int(const char* key, int64_t* out, bool required, int64_t lo, int64_t hi) {
    if (!has(key)) return missing(key, required);
    const json& v = j_.at(key);
    if (!v.is_number_integer()) return err("{}: {} must be an integer", label_, key_path(key));
    const int64_t x =
        v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
    if (x < lo || x > hi)
      return err("{}: {} is {}; it must lie in [{}, {}]", label_, key_path(key), x, lo, hi);
    *out = x;
    return Status();
  }
  Status get_int(const char* key, int* out, bool required, int lo, int hi) {
    int64_t x = *out;
    GRIDQ_RETURN_IF_ERROR(get_int(key, &x, required, lo, hi));
    *out = static_cast<int>(x);
    return Status();
  }
  Status get_double(const char* key, double* out, double lo, double hi) {
    if (!has(key)) return Status();
    const json& v = j_.at(key);
    if (!v.is_number()) return err("{}: {} must be a number", label_, key_path(key));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      return err("{}: {} is {}; it must lie in [{}, {}]", label_, key_path(key), x, lo, hi);
    *out = x;
    return Status();
  }
  // A string key whose only accepted values are `allowed` (the first is what gridq does by default).
  Status get_choice(const char* key, std::string* out, std::initializer_list<const char*> allowed) {
    if (!has(key)) return Status();
    std::string s;
    GRIDQ_RETURN_IF_ERROR(get_string(key, &s, false));
    for (const char* a : allowed)
      if (s == a) {
        *out = s;
        return Status();
      }
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + "\"" + a + "\"";
    return err("{}: {} is \"{}\"; accepted: {}", label_, key_path(key), s, list);
  }
  Status check_unknown() const {
    for (const auto& [k, v] : j_.items()) {
      if (!seen_.count(k)) {
        std::string known;
        for (const std::string& s : seen_) known += std::string(known.empty() ? "" : ", ") + s;
        return err("{}: unknown key '{}' in {} (known keys: {})", label_, k, where(), known);
      }
    }
    return Status();
  }

 private:
  std::string where() const { return path_.empty() ? "the top level" : path_; }
  Status missing(const char* key, bool required) const {
    if (required) return err("{}: missing required key {}", label_, key_path(key));
    return Status();
  }
  const json& j_;
  std::string path_;
  const std::string& label_;
  std::set<std::string> seen_;
};

const char* kFormatList = "BF16, FP8_DYNAMIC, NVFP4_CB_K12..NVFP4_CB_K24, FP8_CB_K28..FP8_CB_K48";

Status parse_rule(const json& j, int index, const std::string& label, RecipeRule* out) {
  const std::string path = "rules[" + std::to_string(index) + "]";
  ObjectReader r(j, path, label);
  GRIDQ_RETURN_IF_ERROR(r.require_object());
  RecipeRule rule;
  GRIDQ_RETURN_IF_ERROR(r.get_string("match", &rule.match, true));
  {
    auto re = NameRegex::compile(rule.match);
    if (!re.ok()) return err("{}: {}.match \"{}\": {}", label, path, rule.match, re.message());
  }
  GRIDQ_RETURN_IF_ERROR(r.get_string("format", &rule.format, true));
  const bool bf16 = rule.format == "BF16";
  const bool fp8_dynamic = rule.format == "FP8_DYNAMIC";
  const bool cb = is_cb_format(rule.format);
  if (!bf16 && !fp8_dynamic && !cb) {
    return err("{}: {}.format \"{}\" is not a format gridq knows ({})", label, path, rule.format,
               kFormatList);
  }
  const bool fp4 = cb && rule.format.rfind("NVFP4_", 0) == 0;
  // Keys that only make sense for some formats are refused elsewhere: a BF16 rule with "codebook" is a
  // mistake in the file, not something to ignore.
  auto refuse_key = [&](const char* key, const char* why) -> Status {
    if (r.has(key))
      return err("{}: {}.{} is not accepted with format {}: {}", label, path, key, rule.format, why);
    return Status();
  };
  if (fp4) {
    GRIDQ_RETURN_IF_ERROR(r.get_choice("scale_coding", &rule.scale_coding, {"two_tier", "v1"}));
  } else {
    GRIDQ_RETURN_IF_ERROR(refuse_key("scale_coding", "only NVFP4_CB rungs have a scale plane"));
  }
  if (cb) {
    GRIDQ_RETURN_IF_ERROR(
        r.get_choice("codebook", &rule.codebook, {"lattice", "learned", "learned-per-layer"}));
  } else {
    GRIDQ_RETURN_IF_ERROR(refuse_key("codebook", "only codebook (CB) rungs have a codebook"));
  }
  if (bf16) {
    GRIDQ_RETURN_IF_ERROR(refuse_key("encoder", "BF16 copies the source bytes, nothing is encoded"));
  } else {
    rule.encoder = cb ? "cb_gptq" : "rtn";
    GRIDQ_RETURN_IF_ERROR(r.get_choice("encoder", &rule.encoder, {"cb_gptq", "rtn"}));
  }
  if (cb) {
    auto rung = rule_rung(rule);
    if (!rung.ok()) return err("{}: {}.format \"{}\": {}", label, path, rule.format, rung.message());
  }
  GRIDQ_RETURN_IF_ERROR(r.check_unknown());
  *out = std::move(rule);
  return Status();
}

Status parse_encoders(const json& j, const std::string& label, Recipe* rec) {
  ObjectReader r(j, "encoders", label);
  GRIDQ_RETURN_IF_ERROR(r.require_object());
  if (r.has("cb_gptq")) {
    ObjectReader g(r.at("cb_gptq"), "encoders.cb_gptq", label);
    GRIDQ_RETURN_IF_ERROR(g.require_object());
    CbGptqParams& p = rec->cb_gptq;
    GRIDQ_RETURN_IF_ERROR(g.get_double("damp", &p.damp, 1e-8, 1e6));
    GRIDQ_RETURN_IF_ERROR(g.get_int("block", &p.block, false, 8, 1 << 16));
    GRIDQ_RETURN_IF_ERROR(g.get_bool("holdout_gate", &p.holdout_gate));
    GRIDQ_RETURN_IF_ERROR(g.get_choice("step", &p.step, {"sub"}));
    GRIDQ_RETURN_IF_ERROR(g.get_choice("scales", &p.scales, {"lazy"}));
    // true: group-wise act order (cb_act_order.h), which keeps codewords contiguous in column order.
    GRIDQ_RETURN_IF_ERROR(g.get_bool("act_order", &p.act_order));
    GRIDQ_RETURN_IF_ERROR(g.get_int("refine_passes", &p.refine_passes, false, 0, 64));
    GRIDQ_RETURN_IF_ERROR(g.get_bool("refine_scales", &p.refine_scales));
    if (p.block % 8 != 0)
      return err("{}: encoders.cb_gptq.block is {}; it must be a multiple of 8", label, p.block);
    GRIDQ_RETURN_IF_ERROR(g.check_unknown());
  }
  if (r.has("two_tier")) {
    ObjectReader t(r.at("two_tier"), "encoders.two_tier", label);
    GRIDQ_RETURN_IF_ERROR(t.require_object());
    TwoTierParams& p = rec->two_tier;
    GRIDQ_RETURN_IF_ERROR(t.get_choice("tier", &p.tier, {"max"}));
    GRIDQ_RETURN_IF_ERROR(t.get_int("pilot_rows", &p.pilot_rows, false, 1, 1 << 24));
    GRIDQ_RETURN_IF_ERROR(t.get_int("refits", &p.refits, false, 0, 16));
    GRIDQ_RETURN_IF_ERROR(t.check_unknown());
  }
  return r.check_unknown();
}

bool is_preset_name(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Expected<std::string> read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return err("recipe '{}': no such file", path);
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("recipe '{}': cannot open it", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return err("recipe '{}': read failed", path);
  return ss.str();
}

std::string exe_dir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

}  // namespace

bool is_cb_format(std::string_view format) {
  return format.rfind("NVFP4_CB_", 0) == 0 || format.rfind("FP8_CB_", 0) == 0;
}

Expected<gridbook::Rung> rule_rung(const RecipeRule& rule) {
  if (!is_cb_format(rule.format)) return err("format {} is not a codebook rung", rule.format);
  int layout = 2;
  if (rule.format.rfind("NVFP4_", 0) == 0) {
    if (rule.scale_coding == "v1") {
      layout = 1;
    } else if (rule.scale_coding != "two_tier") {
      return err("scale_coding \"{}\" is neither \"two_tier\" nor \"v1\"", rule.scale_coding);
    }
  }
  GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung rung, gridbook::parse_rung_name(rule.format, layout));
  if (rung.mode != gridbook::Mode::Product) {
    return err("{}: only product-mode rungs are implemented (format.md §3)", rule.format);
  }
  return rung;
}

Expected<Recipe> parse_recipe(const std::string& bytes, const std::string& label) {
  GRIDQ_ASSIGN_OR_RETURN(json j, io::parse_json_strict(bytes, label, 64));
  ObjectReader r(j, "", label);
  GRIDQ_RETURN_IF_ERROR(r.require_object());
  Recipe rec;
  GRIDQ_RETURN_IF_ERROR(r.get_string("recipe", &rec.name, true));
  if (rec.name.empty()) return err("{}: recipe (the name) must not be empty", label);
  GRIDQ_RETURN_IF_ERROR(r.get_int("version", &rec.version, true, 1, 1));
  GRIDQ_RETURN_IF_ERROR(r.get_string("model_type", &rec.model_type, true));
  if (rec.model_type.empty()) return err("{}: model_type must not be empty", label);
  GRIDQ_RETURN_IF_ERROR(r.get_string("description", &rec.description, false));
  if (r.has("calibration")) {
    ObjectReader c(r.at("calibration"), "calibration", label);
    GRIDQ_RETURN_IF_ERROR(c.require_object());
    GRIDQ_RETURN_IF_ERROR(c.get_int("tokens", &rec.calib_tokens, false, 1, int64_t{1} << 40));
    GRIDQ_RETURN_IF_ERROR(c.get_int("seq_len", &rec.calib_seq_len, false, 2, 1 << 20));
    GRIDQ_RETURN_IF_ERROR(c.get_int("holdout_every", &rec.holdout_every, false, 0, 1 << 20));
    GRIDQ_RETURN_IF_ERROR(c.check_unknown());
    if (rec.calib_tokens % rec.calib_seq_len != 0 || rec.calib_tokens < rec.calib_seq_len) {
      return err("{}: calibration.tokens ({}) must be a positive multiple of calibration.seq_len ({})", label,
                 rec.calib_tokens, rec.calib_seq_len);
    }
    if (rec.holdout_every == 1) {
      return err("{}: calibration.holdout_every is 1, which holds out every sequence (0 = no holdout, >= 2)",
                 label);
    }
  }
  GRIDQ_RETURN_IF_ERROR(r.get_bool("router_weighted_hessian", &rec.router_weighted_hessian));
  if (!r.has("rules")) return err("{}: missing required key rules", label);
  const json& rules = r.at("rules");
  if (!rules.is_array() || rules.empty())
    return err("{}: rules must be a non-empty array of rule objects", label);
  for (size_t i = 0; i < rules.size(); ++i) {
    RecipeRule rule;
    GRIDQ_RETURN_IF_ERROR(parse_rule(rules[i], static_cast<int>(i), label, &rule));
    rec.rules.push_back(std::move(rule));
  }
  if (r.has("encoders")) GRIDQ_RETURN_IF_ERROR(parse_encoders(r.at("encoders"), label, &rec));
  GRIDQ_RETURN_IF_ERROR(r.check_unknown());
  for (size_t i = 0; i < rec.rules.size(); ++i) {
    const RecipeRule& rule = rec.rules[i];
    if (rule.format.rfind("NVFP4_", 0) == 0 && rule.encoder == "cb_gptq" && rec.cb_gptq.block != 256) {
      return err(
          "{}: encoders.cb_gptq.block is {}; rules[{}] ({}) needs 256 (one superblock per block, "
          "quantizer.md §5)",
          label, rec.cb_gptq.block, i, rule.format);
    }
  }
  rec.sha256 = io::sha256_hex({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  rec.source = std::move(j);
  return rec;
}

std::vector<std::string> recipe_search_dirs(const std::string& repo_root) {
  std::vector<std::string> dirs;
  if (!repo_root.empty()) dirs.push_back((fs::path(repo_root) / "recipes").string());
  const std::string exe = exe_dir();
  if (!exe.empty()) {
    dirs.push_back((fs::path(exe) / ".." / "share" / "gridq" / "recipes").lexically_normal().string());
    dirs.push_back((fs::path(exe) / ".." / "recipes").lexically_normal().string());
  }
  return dirs;
}

std::vector<std::string> preset_names(const std::string& repo_root) {
  std::set<std::string> names;
  for (const std::string& d : recipe_search_dirs(repo_root)) {
    std::error_code ec;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() == ".json" && it->is_regular_file(ec) && is_preset_name(p.stem().string()))
        names.insert(p.stem().string());
    }
  }
  return {names.begin(), names.end()};
}

Expected<Recipe> load_recipe(const std::string& name_or_path, const std::string& repo_root) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (is_path) {
    GRIDQ_ASSIGN_OR_RETURN(std::string bytes, read_file(name_or_path));
    return parse_recipe(bytes, "recipe " + name_or_path);
  }
  if (!is_preset_name(name_or_path)) {
    return err(
        "recipe '{}': not a preset name ([A-Za-z0-9._-]+) and not a path (contains '/' or ends in .json)",
        name_or_path);
  }
  for (const std::string& d : recipe_search_dirs(repo_root)) {
    const std::string p = (fs::path(d) / (name_or_path + ".json")).string();
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) {
      GRIDQ_ASSIGN_OR_RETURN(std::string bytes, read_file(p));
      return parse_recipe(bytes, "recipe " + p);
    }
  }
  std::string list;
  for (const std::string& n : preset_names(repo_root)) list += std::string(list.empty() ? "" : ", ") + n;
  std::string dirs;
  for (const std::string& d : recipe_search_dirs(repo_root))
    dirs += std::string(dirs.empty() ? "" : ", ") + d;
  return err("recipe '{}': no such preset (presets: {}; searched {})", name_or_path,
             list.empty() ? "none found" : list, dirs);
}

Status check_model_type(const Recipe& recipe, const nlohmann::json& config) {
  const auto it = config.find("model_type");
  if (it == config.end() || !it->is_string())
    return err("recipe '{}': config.json has no string model_type to compare with '{}'", recipe.name,
               recipe.model_type);
  if (it->get<std::string>() != recipe.model_type)
    return err("recipe '{}' is for model_type '{}', but config.json says '{}'", recipe.name,
               recipe.model_type, it->get<std::string>());
  return Status();
}

}  // namespace gridq::quant

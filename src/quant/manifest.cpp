#include "quant/manifest.h"

#include <filesystem>
#include <fstream>

#include "io/checkpoint.h"

namespace gridq::quant {

using nlohmann::json;

json ResumeInputs::to_json() const {
  return {{"recipe_sha256", recipe_sha256},
          {"source_sha256", source_sha256},
          {"calib_sha256", calib_sha256},
          {"options_sha256", options_sha256}};
}

Expected<ResumeInputs> ResumeInputs::from_json(const json& j) {
  try {
    ResumeInputs r;
    r.recipe_sha256 = j.at("recipe_sha256").get<std::string>();
    r.source_sha256 = j.at("source_sha256").get<std::string>();
    r.calib_sha256 = j.at("calib_sha256").get<std::string>();
    r.options_sha256 = j.at("options_sha256").get<std::string>();
    return r;
  } catch (const std::exception& e) {
    return err("inputs: {}", e.what());
  }
}

std::string ResumeInputs::diff(const ResumeInputs& o) const {
  auto one = [](const char* what, const std::string& a, const std::string& b) -> std::string {
    if (a == b) return "";
    return fmt::format("{} (sha256 {}… now, {}… recorded)", what, a.substr(0, 12), b.substr(0, 12));
  };
  for (std::string d :
       {one("recipe", recipe_sha256, o.recipe_sha256), one("source model", source_sha256, o.source_sha256),
        one("calibration text", calib_sha256, o.calib_sha256),
        one("options", options_sha256, o.options_sha256)}) {
    if (!d.empty()) return d;
  }
  return "";
}

json Manifest::to_json() const {
  json layers_j = json::array();
  for (const LayerRecord& l : layers) {
    layers_j.push_back({{"layer", l.layer},
                        {"shard", l.shard},
                        {"shard_sha256", l.shard_sha256},
                        {"carry", l.carry},
                        {"carry_sha256", l.carry_sha256},
                        {"stats", l.stats},
                        {"cb_slices", l.cb_slices},
                        {"checks", l.checks},
                        {"extra", l.extra}});
  }
  return {{"gridq_resume_manifest", version}, {"inputs", inputs.to_json()}, {"layers", layers_j}};
}

Expected<Manifest> Manifest::from_json(const json& j, const std::string& label) {
  try {
    Manifest m;
    m.version = j.at("gridq_resume_manifest").get<int>();
    if (m.version != 1) return err("{}: manifest version {} is not 1", label, m.version);
    auto in = ResumeInputs::from_json(j.at("inputs"));
    if (!in.ok()) return err("{}: {}", label, in.message());
    m.inputs = *in;
    for (const json& l : j.at("layers")) {
      LayerRecord r;
      r.layer = l.at("layer").get<int>();
      r.shard = l.at("shard").get<std::string>();
      r.shard_sha256 = l.at("shard_sha256").get<std::string>();
      r.carry = l.at("carry").get<std::string>();
      r.carry_sha256 = l.at("carry_sha256").get<std::string>();
      r.stats = l.at("stats");
      r.cb_slices = l.at("cb_slices");
      r.checks = l.at("checks");
      r.extra = l.at("extra");
      if (r.layer != static_cast<int>(m.layers.size()))
        return err("{}: layer record {} out of order (expected {})", label, r.layer, m.layers.size());
      m.layers.push_back(std::move(r));
    }
    return m;
  } catch (const std::exception& e) {
    return err("{}: malformed resume manifest: {}", label, e.what());
  }
}

Expected<Manifest> Manifest::read(const std::string& path) {
  GRIDQ_ASSIGN_OR_RETURN(json j, io::read_json_file(path));
  return from_json(j, path);
}

Status Manifest::write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("{}: cannot create", tmp);
    f << to_json().dump(1) << "\n";
    f.flush();
    if (!f) return err("{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err("{}: cannot rename into place: {}", path, ec.message());
  return Status();
}

}  // namespace gridq::quant

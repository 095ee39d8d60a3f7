// gridq inspect PATH [--json] [--summary]: the format report of a Hugging Face checkpoint or a gridbook
// artifact. Opening runs every load-time check of format.md §15 (and PINS.json when present), so a clean
// report is also a validation; any violation exits non-zero with the message. JSON schema: docs/inspect.md.
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "gridbook/artifact.h"
#include "io/checkpoint.h"
#include "io/pins.h"
#include "model/config_check.h"
#include "model/loader.h"
#include "runtime/artifact_weights.h"

namespace gridq::cli {
namespace {

using gridbook::Component;
using nlohmann::json;

constexpr const char* kSchema = "gridq.inspect/1";

struct Totals {
  int64_t params = 0;
  uint64_t bytes = 0;
  int64_t modules = 0;
  double bpw() const {
    return params > 0 ? static_cast<double>(bytes) * 8.0 / static_cast<double>(params) : 0.0;
  }
  double gib() const { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }
};

std::string group_digits(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string human_params(int64_t p) {
  if (p >= 1000000000) return fmt::format("{:.2f}B", static_cast<double>(p) / 1e9);
  if (p >= 1000000) return fmt::format("{:.1f}M", static_cast<double>(p) / 1e6);
  if (p >= 1000) return fmt::format("{:.1f}K", static_cast<double>(p) / 1e3);
  return std::to_string(p);
}

json totals_json(const Totals& t) {
  return json{
      {"params", t.params}, {"bytes", t.bytes}, {"gib", t.gib()}, {"bpw", t.bpw()}, {"modules", t.modules}};
}

int run_inspect(const std::string& path, bool as_json, bool summary) {
  auto fail_json = [&](const std::string& msg) {
    if (as_json)
      std::cout << json{{"schema", kSchema}, {"path", path}, {"ok", false}, {"error", msg}}.dump(2) << "\n";
    return fail(msg);
  };
  // Config values first, so a refusal names the key rather than a tensor shape it implies.
  if (auto cfg = io::read_json_file((std::filesystem::path(path) / "config.json").string()); cfg.ok()) {
    if (Status st = model::check_config_values(*cfg); !st.ok()) return fail_json(st.message());
  }
  auto opened = gridbook::Artifact::open_any(path);
  if (!opened.ok()) return fail_json(opened.message());
  const gridbook::Artifact& a = **opened;
  // The same checks the loader of generate/chat/serve runs (config ranges, the architecture adapter, the
  // spec): a report must not call clean what the loader refuses (issue 14 item 4).
  const Status loads = a.config().contains("quantization_config")
                           ? runtime::load_artifact_model(path).status()
                           : model::load_model(path).status();
  if (!loads.ok())
    return fail_json(fmt::format("{}: the loader refuses this model: {}", path, loads.message()));

  std::string pins = "absent";
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(path) / io::kPinsFile, ec)) {
    Status st = io::verify_pins(path);
    if (!st.ok()) return fail_json(fmt::format("{}: PINS.json verification failed:\n{}", path, st.message()));
    pins = "verified";
  }

  std::map<Component, Totals> per;
  Totals total;
  for (const auto& m : a.modules()) {
    Totals& t = per[m.component];
    t.params += m.params;
    t.bytes += m.bytes;
    ++t.modules;
    total.params += m.params;
    total.bytes += m.bytes;
    ++total.modules;
  }
  const gridbook::QuantConfig* qc = a.quant_config();
  const std::string model_type = a.config().value("model_type", std::string());

  if (as_json) {
    json j;
    j["schema"] = kSchema;
    j["path"] = path;
    j["ok"] = true;
    j["kind"] = a.quantized() ? "artifact" : "checkpoint";
    j["model_type"] = model_type;
    if (qc) {
      json groups = json::array();
      for (size_t g = 0; g < qc->groups.size(); ++g) {
        int64_t n = 0;
        for (const auto& m : a.modules()) n += m.group == static_cast<int>(g) ? 1 : 0;
        const auto& grp = qc->groups[g];
        groups.push_back({{"name", grp.name},
                          {"kind", grp.scheme ? "codebook" : "compressed-tensors"},
                          {"format", grp.scheme ? grp.scheme->rung.name() : std::string("FP8_W8A8")},
                          {"modules", n}});
      }
      j["quantization"] = {{"quant_method", qc->quant_method},
                           {"format", qc->format},
                           {"layout_version", qc->layout_version},
                           {"groups", groups},
                           {"ignore_entries", qc->ignore.size()}};
    } else {
      j["quantization"] = nullptr;
    }
    json mods = json::array();
    if (!summary) {
      for (const auto& m : a.modules()) {
        mods.push_back({{"name", m.name},
                        {"component", gridbook::component_name(m.component)},
                        {"linear", m.linear},
                        {"format", gridbook::weight_format_name(m.format)},
                        {"rung", m.rung ? json(m.rung->name()) : json(nullptr)},
                        {"shape", m.shape},
                        {"params", m.params},
                        {"bytes", m.bytes},
                        {"bpw", m.bpw()}});
      }
    }
    j["modules"] = mods;
    json comps = json::object();
    for (Component c : gridbook::kAllComponents) {
      if (c == Component::kOther && !per.count(c)) continue;
      comps[std::string(gridbook::component_name(c))] = totals_json(per[c]);
    }
    j["components"] = comps;
    j["totals"] = totals_json(total);
    j["checks"] = a.checks();
    j["pins"] = pins;
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::cout << fmt::format("{}: {} ({}){}\n", path,
                           a.quantized() ? "gridbook artifact" : "Hugging Face checkpoint",
                           model_type.empty() ? "unknown model_type" : model_type,
                           qc ? fmt::format(", layout v{}", qc->layout_version) : "");
  if (!summary) {
    std::cout << fmt::format("\n{:<58} {:<15} {:<13} {:>20} {:>12} {:>14} {:>8}\n", "module", "component",
                             "format", "shape", "params", "bytes", "bpw");
    for (const auto& m : a.modules()) {
      std::cout << fmt::format("{:<58} {:<15} {:<13} {:>20} {:>12} {:>14} {:>8.4f}\n", m.name,
                               gridbook::component_name(m.component), m.format_label(), shape_str(m.shape),
                               group_digits(m.params), group_digits(static_cast<int64_t>(m.bytes)), m.bpw());
    }
  }
  std::cout << fmt::format("\n{:<16} {:>8} {:>16} {:>16} {:>10} {:>8}\n", "component", "modules", "params",
                           "bytes", "GiB", "bpw");
  for (Component c : gridbook::kAllComponents) {
    if (!per.count(c)) continue;
    const Totals& t = per[c];
    std::cout << fmt::format("{:<16} {:>8} {:>16} {:>16} {:>10.4f} {:>8.4f}\n", gridbook::component_name(c),
                             t.modules, group_digits(t.params), group_digits(static_cast<int64_t>(t.bytes)),
                             t.gib(), t.bpw());
  }
  std::cout << fmt::format("{:<16} {:>8} {:>16} {:>16} {:>10.4f} {:>8.4f}\n", "total", total.modules,
                           group_digits(total.params), group_digits(static_cast<int64_t>(total.bytes)),
                           total.gib(), total.bpw());
  std::cout << fmt::format("\nparameters: {} ({})\n", group_digits(total.params), human_params(total.params));
  for (const auto& c : a.checks()) std::cout << "check: " << c << "\n";
  std::cout << "check: PINS.json " << pins << "\n";
  return 0;
}

const Registrar kRegistrar{Command{
    "inspect", "Validate and report a checkpoint or gridbook artifact: formats, shapes, bytes, bits/weight",
    [](CLI::App& sub) -> std::function<int()> {
      auto path = std::make_shared<std::string>();
      auto as_json = std::make_shared<bool>(false);
      auto summary = std::make_shared<bool>(false);
      sub.add_option("path", *path, "Hugging Face checkpoint directory or gridbook artifact directory")
          ->required();
      sub.add_flag("--json", *as_json, "Print a JSON report (schema gridq.inspect/1, see docs/inspect.md)");
      sub.add_flag("--summary", *summary, "Omit the per-module table (component totals only)");
      sub.footer(
          "Every load-time check of the gridbook format runs first (containers, config, schemes, tensor "
          "shapes,\n"
          "codebooks and their SHA-256 provenance, v2 scale legality, coverage, PINS.json when present);\n"
          "any violation exits with status 1 and a message naming the tensor and the rule.\n\n"
          "Examples:\n"
          "  gridq inspect models/laguna-tiny-code\n"
          "  gridq inspect models/laguna-tiny-code --json | python3 -m json.tool\n"
          "  gridq inspect out/laguna-k16 --summary\n");
      return [=] { return run_inspect(*path, *as_json, *summary); };
    }}};

}  // namespace
}  // namespace gridq::cli

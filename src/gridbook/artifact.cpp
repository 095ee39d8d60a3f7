#include "gridbook/artifact.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "gridbook/artifact_detail.h"
#include "gridbook/matching.h"
#include "gridbook/model_layout.h"
#include "gridbook/scale_coding.h"

namespace gridq::gridbook {

namespace fs = std::filesystem;
using io::DType;
using io::TensorInfo;

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBF16:
      return "BF16";
    case WeightFormat::kF16:
      return "F16";
    case WeightFormat::kF32:
      return "F32";
    case WeightFormat::kFP8W8A8:
      return "FP8_W8A8";
    case WeightFormat::kCodebook:
      return "CB";
  }
  return "?";
}

std::string ModuleInfo::format_label() const {
  if (format == WeightFormat::kCodebook && rung) return rung->name();
  return std::string(weight_format_name(format));
}

using namespace artifact_detail;  // the per-module checks (artifact_modules.cpp)

namespace {

// Tensor suffixes of quantization schemes gridq does not implement; refused rather than left unconsumed.
constexpr std::string_view kRefusedLeaves[] = {
    "input_scale", "input_global_scale", "weight_global_scale", "weight_zero_point", "k_scale",
    "v_scale",     "weight_packed",      "weight_shape"};

std::optional<int> layer_of(std::string_view canonical) {
  static constexpr std::string_view kP = "model.layers.";
  if (canonical.substr(0, kP.size()) != kP) return std::nullopt;
  size_t i = kP.size();
  int v = 0;
  size_t digits = 0;
  while (i < canonical.size() && canonical[i] >= '0' && canonical[i] <= '9' && digits < 7) {
    v = v * 10 + (canonical[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || i >= canonical.size() || canonical[i] != '.') return std::nullopt;
  return v;
}

}  // namespace

Expected<std::unique_ptr<Artifact>> Artifact::open(const std::string& dir) { return open_impl(dir, true); }
Expected<std::unique_ptr<Artifact>> Artifact::open_any(const std::string& dir) {
  return open_impl(dir, false);
}

const ModuleInfo* Artifact::find_module(std::string_view name) const {
  for (const auto& m : modules_) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const Codebook* Artifact::codebook(const ModuleInfo& m) const {
  if (m.format != WeightFormat::kCodebook) return nullptr;
  auto it = codebooks_.find(m.group);
  return it == codebooks_.end() ? nullptr : &it->second;
}

Expected<std::unique_ptr<Artifact>> Artifact::open_impl(const std::string& dir, bool require_quantized) {
  std::unique_ptr<Artifact> a(new Artifact());
  GRIDQ_ASSIGN_OR_RETURN(a->ckpt_, io::Checkpoint::open(dir));
  const std::string where = dir;
  GRIDQ_ASSIGN_OR_RETURN(a->stub_, parse_quantization_stub(a->ckpt_->config()));
  if (!a->stub_) {
    if (require_quantized) {
      return err("{}: config.json has no quantization_config; not a gridbook artifact (format.md §11.1)",
                 where);
    }
  } else {
    if (a->stub_->inline_config) {
      a->quant_ = a->stub_->inline_config;
    } else {
      const std::string path = (fs::path(dir) / a->stub_->config_file).string();
      GRIDQ_ASSIGN_OR_RETURN(auto j, io::read_json_file(path));
      GRIDQ_ASSIGN_OR_RETURN(auto qc, parse_quant_config(j, path));
      a->quant_ = std::move(qc);
    }
    bool any_cb = false;
    for (const auto& g : a->quant_->groups) any_cb = any_cb || g.scheme.has_value();
    const std::string cb_path = (fs::path(dir) / a->stub_->codebook_file).string();
    std::error_code ec;
    if (any_cb || fs::exists(cb_path, ec)) {
      GRIDQ_ASSIGN_OR_RETURN(auto sc, Sidecar::read(cb_path));
      a->sidecar_ = std::move(sc);
      GRIDQ_RETURN_IF_ERROR(verify_codebook_provenance(a->quant_->codebook_sha256, *a->sidecar_));
      if (a->quant_->codebook_sha256) {
        a->checks_.push_back(fmt::format("codebook provenance: {} table digest(s) verified",
                                         a->quant_->codebook_sha256->size()));
      } else {
        a->checks_.push_back("codebook provenance: absent (not checked)");
      }
    }
  }
  GRIDQ_RETURN_IF_ERROR(a->build_modules());
  return a;
}

Status Artifact::build_modules() {
  const std::string& dir = ckpt_->dir();
  const QuantConfig* qc = quant_ ? &*quant_ : nullptr;

  // 1. Tensors -> modules.
  std::map<std::string, ModuleTensors> by_alias;  // key: spelling_alias(module)
  std::set<std::string> consumed;
  for (const std::string& name : ckpt_->names()) {
    const TensorInfo* t = ckpt_->find(name);
    if (name.ends_with(".rotary_emb.inv_freq")) {  // a buffer, recomputed from the config (laguna.md §4)
      consumed.insert(name);
      continue;
    }
    if (name.find(".format_group_") != std::string::npos) {
      return err(
          "tensor '{}': per_expert_format_groups split stacks are not supported by gridq (format.md §9)",
          name);
    }
    const size_t dot = name.rfind('.');
    const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    for (std::string_view r : kRefusedLeaves) {
      if (leaf == r) {
        return err("tensor '{}': '{}' tensors are not supported by gridq (format.md §9, §12)", name, leaf);
      }
    }
    std::string module = name;
    const TensorInfo** slot = nullptr;
    if (leaf == "weight" || leaf == "cb_qweight" || leaf == "weight_scale") module = name.substr(0, dot);
    const std::string alias = spelling_alias(module);
    ModuleTensors& mt = by_alias[alias];
    if (!mt.name.empty() && mt.name != module) {
      return err("modules '{}' and '{}' are two spellings of '{}' (format.md §13: refuse)", mt.name, module,
                 alias);
    }
    mt.name = module;
    if (module == name) {
      slot = &mt.bare;
    } else if (leaf == "weight") {
      slot = &mt.weight;
    } else if (leaf == "cb_qweight") {
      slot = &mt.cb_qweight;
    } else {
      slot = &mt.weight_scale;
    }
    if (*slot != nullptr) return err("tensor '{}' appears twice under two spellings", name);
    *slot = t;
  }

  // 2. Expected modules of the architecture.
  const nlohmann::json& cfg = ckpt_->config();
  std::map<int, ExpertLayout> layouts;
  for (const auto& [alias, mt] : by_alias) {
    auto re = parse_routed_expert(alias);
    if (!re) continue;
    auto layer = layer_of(alias);
    if (!layer) continue;
    const ExpertLayout l = re->expert ? ExpertLayout::kPerExpert : ExpertLayout::kStacked;
    auto [it, fresh] = layouts.emplace(*layer, l);
    if (!fresh && it->second != l) {
      return err("{}: layer {} mixes per-expert and stacked routed-expert tensors (e.g. '{}'; laguna.md §4)",
                 dir, *layer, mt.name);
    }
  }
  const ExpertLayout default_layout = qc ? ExpertLayout::kStacked : ExpertLayout::kPerExpert;
  auto specs_or = laguna_module_specs(cfg, [&](int l) {
    auto it = layouts.find(l);
    return it == layouts.end() ? default_layout : it->second;
  });
  if (!specs_or.ok()) {
    if (qc) return err("{}: {}", dir, specs_or.message());
    // Unknown architecture, plain checkpoint: list tensors as they are, unvalidated.
    for (const std::string& name : ckpt_->names()) {
      const TensorInfo* t = ckpt_->find(name);
      ModuleInfo m;
      m.name = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
      m.component = classify_component(name);
      GRIDQ_ASSIGN_OR_RETURN(m.format, passthrough_format(*t));
      m.shape = t->shape;
      m.params = t->numel();
      m.bytes = t->nbytes();
      m.weight_tensor = name;
      modules_.push_back(std::move(m));
    }
    checks_.push_back(
        fmt::format("architecture not recognised ({}): tensor shapes not validated", specs_or.message()));
    return Status();
  }
  const std::vector<ModuleSpec>& specs = *specs_or;

  std::vector<const ModuleSpec*> present;
  std::vector<std::string> linear_names, other_names;
  for (const ModuleSpec& s : specs) {
    auto it = by_alias.find(s.name);
    if (it == by_alias.end()) {
      const std::string plain = s.bare ? s.name : s.name + ".weight";
      const std::string expected =
          qc && s.linear ? fmt::format("'{}' or '{}.cb_qweight'", plain, s.name) : fmt::format("'{}'", plain);
      return err("{}: missing tensor for module '{}' (expected {}; format.md §15 Coverage)", dir, s.name, expected);
    }
    present.push_back(&s);
    (s.linear ? linear_names : other_names).push_back(it->second.name);
  }
  {
    std::set<std::string> spec_names;
    for (const ModuleSpec& s : specs) spec_names.insert(s.name);
    for (const auto& [alias, mt] : by_alias) {
      if (!spec_names.count(alias)) {
        return err(
            "{}: tensor '{}' is not a tensor of this {} config (unconsumed tensor; format.md §13, §15)", dir,
            mt.all().front()->name, cfg.value("model_type", std::string("?")));
      }
    }
  }

  // 3. Claims.
  std::vector<Claim> claims;
  if (qc) {
    std::vector<ClaimGroup> groups;
    for (const auto& g : qc->groups) {
      ClaimGroup cg{g.name, g.scheme ? ClaimKind::kCodebook : ClaimKind::kCompressedTensors, {}};
      for (const auto& t : g.targets) {
        auto p = Pattern::compile(t);
        if (!p.ok()) return err("quant_config.json: group '{}': {}", g.name, p.message());
        cg.targets.push_back(std::move(*p));
      }
      groups.push_back(std::move(cg));
    }
    std::vector<Pattern> ignore;
    for (const auto& e : qc->ignore) {
      auto p = Pattern::compile(e);
      if (!p.ok()) return err("quant_config.json: ignore: {}", p.message());
      ignore.push_back(std::move(*p));
    }
    GRIDQ_ASSIGN_OR_RETURN(claims, claim_modules(groups, ignore, linear_names, other_names));
    std::vector<int> claimed_per_group(qc->groups.size(), 0);
    for (const Claim& c : claims) {
      if (c.group >= 0) ++claimed_per_group[c.group];
    }
    for (size_t g = 0; g < qc->groups.size(); ++g) {
      if (claimed_per_group[g] == 0) {
        return err("quant_config.json: group '{}' claims no Linear of this checkpoint", qc->groups[g].name);
      }
    }
    checks_.push_back(fmt::format("coverage: {} Linear modules claimed exactly once", claims.size()));
  }

  // 4. Codebooks per CB group.
  std::set<std::string> tables_used;
  if (qc) {
    for (size_t g = 0; g < qc->groups.size(); ++g) {
      const ConfigGroup& grp = qc->groups[g];
      if (!grp.scheme) continue;
      const CbScheme& s = *grp.scheme;
      if (s.scale_coding && s.scale_coding->table != kV2Table) {
        return err(
            "quant_config.json: group '{}': scale_coding.table differs from the default T4_2oct8m table; "
            "gridq decodes only the default table",
            grp.name);
      }
      if (!sidecar_) return err("{}: group '{}' needs the codebook sidecar", dir, grp.name);
      const std::vector<int> widths = bit_split(s.rung.k, s.n_sub);
      std::vector<std::span<const uint16_t>> spans;
      for (int i = 0; i < s.n_sub; ++i) {
        const std::string& ref = s.codebook_ref[i];
        const CodebookTable* t = sidecar_->find(ref);
        if (!t) {
          return err(
              "{}: group '{}': codebook_ref '{}' is not a table of the sidecar (format.md §15 Codebooks)",
              sidecar_->label(), grp.name, ref);
        }
        const int64_t rows = int64_t{1} << widths[i];
        const int64_t cols = kVecDim / s.n_sub;
        if (t->rows != rows || t->cols != cols) {
          return err("{}: codebook table '{}' has shape [{}, {}], {} sub{} needs [{}, {}] (format.md §10)",
                     sidecar_->label(), ref, t->rows, t->cols, s.rung.name(), i, rows, cols);
        }
        spans.emplace_back(t->f16);
        tables_used.insert(ref);
      }
      GRIDQ_ASSIGN_OR_RETURN(
          auto cb, Codebook::from_f16_tables(s.rung, spans,
                                             fmt::format("{}: group '{}'", sidecar_->label(), grp.name)));
      codebooks_.emplace(static_cast<int>(g), std::move(cb));
    }
    if (sidecar_) {
      for (const auto& t : sidecar_->tables()) {
        if (!tables_used.count(t.name)) {
          return err("{}: codebook table '{}' is referenced by no group's codebook_ref (unconsumed tensor)",
                     sidecar_->label(), t.name);
        }
      }
      if (!codebooks_.empty()) {
        checks_.push_back(
            fmt::format("codebooks: {} table(s) on-grid with the right shapes", tables_used.size()));
      }
    }
  }

  // 5. Per-module tensor checks.
  size_t linear_i = 0;
  uint64_t planes_checked = 0;
  for (const ModuleSpec* sp : present) {
    const ModuleTensors& mt = by_alias.at(sp->name);
    ModuleInfo m;
    m.name = mt.name;
    m.component = sp->component;
    m.linear = sp->linear;
    m.shape = sp->shape;
    std::optional<Claim> claim;
    if (sp->linear && qc) claim = claims[linear_i];
    if (sp->linear) ++linear_i;

    if (claim && claim->kind == ClaimKind::kCodebook) {
      GRIDQ_RETURN_IF_ERROR(
          codebook_module(*sp, mt, qc->groups[claim->group], claim->group, m, planes_checked));
    } else if (claim && claim->kind == ClaimKind::kCompressedTensors) {
      GRIDQ_RETURN_IF_ERROR(fp8_module(*sp, mt, claim->group, m));
    } else {
      GRIDQ_RETURN_IF_ERROR(
          passthrough_module(*sp, mt, claim ? claim_kind_name(claim->kind) : "passthrough", m));
    }
    m.params = product(m.shape);
    for (const TensorInfo* t : mt.all()) consumed.insert(t->name);
    modules_.push_back(std::move(m));
  }
  if (planes_checked > 0) {
    checks_.push_back(fmt::format("scale planes: {} fp4 superblock plane(s) legal", planes_checked));
  }

  // 6. Routed stacks: gate_up and down of one layer share one book (per-role books are refused, format.md
  // §9).
  if (qc) {
    std::map<std::string, std::vector<const ModuleInfo*>> stacks;
    for (const auto& m : modules_) {
      if (auto re = parse_routed_expert(m.name); re && !re->expert) stacks[re->experts_prefix].push_back(&m);
    }
    for (const auto& [prefix, ms] : stacks) {
      for (const ModuleInfo* m : ms) {
        const ModuleInfo* a = ms.front();
        const bool cb_a = a->format == WeightFormat::kCodebook, cb_m = m->format == WeightFormat::kCodebook;
        if (cb_a != cb_m || a->format != m->format) {
          return err(
              "routed experts '{}': '{}' is {} but '{}' is {} (an expert role without a book; format.md §15)",
              prefix, a->name, a->format_label(), m->name, m->format_label());
        }
        if (cb_a && (*a->rung != *m->rung || qc->groups[a->group].scheme->codebook_ref !=
                                                 qc->groups[m->group].scheme->codebook_ref)) {
          return err(
              "routed experts '{}': '{}' ({}) and '{}' ({}) use different books; per-role expert books are "
              "not supported (format.md §9, §15)",
              prefix, a->name, a->format_label(), m->name, m->format_label());
        }
      }
    }
  }

  for (const std::string& name : ckpt_->names()) {
    if (!consumed.count(name)) {
      return err("{}: tensor '{}' is not consumed by any module (format.md §13: every tensor consumed)", dir,
                 name);
    }
  }
  checks_.push_back(fmt::format("tensors: {} tensor(s), all consumed; {} module(s) match the config",
                                consumed.size(), modules_.size()));
  return Status();
}

}  // namespace gridq::gridbook

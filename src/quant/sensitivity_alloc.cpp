// measure_allocation (sensitivity.h): the staged candidates of every budget unit as ProbeStacks, one KlProbe
// per calibration split, and allocate_measured over them.
#include <memory>

#include "io/safetensors.h"
#include "quant/sensitivity.h"

namespace gridq::quant {

using nlohmann::json;

Expected<ProbeSplits> probe_splits(const CalibSet& calib) {
  ProbeSplits s;
  std::vector<int> train;
  for (int i = 0; i < calib.n_seq; ++i)
    (calib.holdout[static_cast<size_t>(i)] ? s.check : train).push_back(i);
  if (s.check.empty())
    return err(
        "--budget-score measured: the calibration set has no held-out sequence to check plans on "
        "(raise --calib-tokens to at least holdout_every sequences)");
  if (train.empty()) return err("--budget-score measured: every calibration sequence is held out");
  const size_t n = std::min(train.size(), s.check.size());
  for (size_t k = 0; k < n; ++k) s.sens.push_back(train[k * train.size() / n]);  // evenly spaced, in order
  return s;
}

namespace {

std::vector<std::vector<int32_t>> sequences(const CalibSet& c, const std::vector<int>& idx) {
  std::vector<std::vector<int32_t>> out;
  for (int i : idx) {
    const auto* p = c.ids.data() + static_cast<size_t>(i) * static_cast<size_t>(c.seq_len);
    out.emplace_back(p, p + c.seq_len);
  }
  return out;
}

// The staged bytes of `unit` as `format` in `sf` (names "<unit>|<format>|<stored name>").
Expected<ProbeStack> staged_stack(const io::SafetensorsFile& sf, const std::string& unit, int layer,
                                  const std::string& format,
                                  const std::map<std::string, gridbook::Codebook>& books) {
  ProbeStack s;
  s.layer = layer;
  s.format = format;
  if (format == "BF16") return s;
  auto it = books.find(format);
  if (it == books.end())
    return err(
        "--budget-score measured: unit '{}' candidate {} is not a CB rung or BF16; measured "
        "allocation runs those only (pass --budget-score proxy)",
        unit, format);
  s.codebook = &it->second;
  const std::string pre = unit + "|" + format + "|";
  auto find = [&](const std::string& leaf, bool need) -> Expected<std::span<const uint8_t>> {
    for (const io::TensorInfo& t : sf.tensors())
      if (t.name.starts_with(pre) && t.name.ends_with(leaf)) return t.bytes();
    if (need) return err("staging: unit '{}' {} has no tensor '*{}'", unit, format, leaf);
    return std::span<const uint8_t>();
  };
  GRIDQ_ASSIGN_OR_RETURN(s.gate_up, find(".gate_up_proj.cb_qweight", true));
  GRIDQ_ASSIGN_OR_RETURN(s.down, find(".down_proj.cb_qweight", true));
  GRIDQ_ASSIGN_OR_RETURN(s.gate_up_scale, find(".gate_up_proj.weight_scale", false));
  GRIDQ_ASSIGN_OR_RETURN(s.down_scale, find(".down_proj.weight_scale", false));
  return s;
}

}  // namespace

Expected<MeasuredResult> measure_allocation(const std::vector<AllocUnit>& units, double budget_bpw,
                                            const MeasureInputs& in) {
  const size_t n = units.size();
  if (in.unit_layer.size() != n || in.unit_stage_file.size() != n)
    return err("measure_allocation: {} units but {} layers / {} staging files", n, in.unit_layer.size(),
               in.unit_stage_file.size());
  GRIDQ_ASSIGN_OR_RETURN(ProbeSplits sp, probe_splits(*in.calib));
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files;  // kept open: the stacks point in
  std::vector<std::vector<ProbeStack>> stacks(n);                     // [unit][option]
  for (size_t u = 0; u < n; ++u) {
    auto& f = files[in.unit_stage_file[u]];
    if (!f) {
      GRIDQ_ASSIGN_OR_RETURN(f, io::SafetensorsFile::open(in.unit_stage_file[u]));
    }
    for (const AllocOption& op : units[u].options) {
      GRIDQ_ASSIGN_OR_RETURN(ProbeStack s,
                             staged_stack(*f, units[u].name, in.unit_layer[u], op.format, *in.codebooks));
      stacks[u].push_back(std::move(s));
    }
  }
  auto step = [&](const std::string& w) {
    if (in.on_step) in.on_step(w);
  };

  MeasuredResult r;
  step("teacher (sensitivity split)");
  GRIDQ_ASSIGN_OR_RETURN(auto sens_probe,
                         KlProbe::create(*in.model, sequences(*in.calib, sp.sens), in.threads));
  r.sens.resize(n);
  for (size_t u = 0; u < n; ++u) {
    for (size_t o = 0; o < stacks[u].size(); ++o) {
      if (stacks[u][o].format == "BF16") {
        r.sens[u].push_back(0.0);  // the teacher itself
        continue;
      }
      step(units[u].name + " " + stacks[u][o].format);
      const ProbeStack one[1] = {stacks[u][o]};
      GRIDQ_ASSIGN_OR_RETURN(double kl, sens_probe->kl(one));
      r.sens[u].push_back(kl);
    }
  }
  sens_probe.reset();
  step("teacher (check split)");
  GRIDQ_ASSIGN_OR_RETURN(auto check_probe,
                         KlProbe::create(*in.model, sequences(*in.calib, sp.check), in.threads));
  auto check = [&](const std::vector<int>& choice) -> Expected<double> {
    std::vector<ProbeStack> plan;
    for (size_t u = 0; u < n; ++u) plan.push_back(stacks[u][static_cast<size_t>(choice[u])]);
    step("check plan");
    return check_probe->kl(plan);
  };
  GRIDQ_ASSIGN_OR_RETURN(r.alloc, allocate_measured(units, r.sens, budget_bpw, check));

  json cands = json::array();
  for (const PlanCandidate& c : r.alloc.candidates) {
    json fs = json::array();
    for (size_t u = 0; u < n; ++u)
      fs.push_back(units[u].options[static_cast<size_t>(c.plan.choice[u])].format);
    cands.push_back({{"label", c.label},
                     {"bpw", c.plan.bpw},
                     {"proxy_cost", c.plan.cost},
                     {"check_kl", c.check_kl},
                     {"formats", fs}});
  }
  r.report = {{"sens_sequences", sp.sens},
              {"check_sequences", sp.check},
              {"sens_positions", static_cast<int64_t>(sp.sens.size()) * (in.calib->seq_len - 1)},
              {"check_positions", check_probe->positions()},
              {"candidates", cands},
              {"chosen", r.alloc.candidates[r.alloc.chosen].label}};
  return r;
}

}  // namespace gridq::quant

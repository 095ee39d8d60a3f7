// The last step of the quantize driver (pipeline_driver.h): assembly of the artifact, its checks and pins.
#include <algorithm>
#include <set>

#include "quant/pipeline_driver.h"

namespace gridq::quant::pipeline_detail {

using nlohmann::json;

Status Driver::finish(QuantizeSummary& s) {
  progress->update("finish", "rest shard");
  GRIDQ_ASSIGN_OR_RETURN(std::vector<EncodedTensor> rest,
                         encode_layer_tensors(tasks, -1, nullptr, *model.checkpoint, codebooks));
  json stats = json::object(), checks = json::array();
  std::vector<CbSlice> slices;
  for (const EncodedTensor& e : rest) stats[e.stats.tensor] = e.stats.to_json();
  GRIDQ_ASSIGN_OR_RETURN(ShardContent rc, assemble_tensors(std::move(rest)));
  const std::string rest_shard = shard_file_name(n_layers, n_layers + 1);
  GRIDQ_RETURN_IF_ERROR(write_shard(partial_file(rest_shard), rc.tensors).status());

  std::map<std::string, std::string> formats;  // source tensor -> final format
  std::map<std::string, std::string> encoders;
  for (const TensorTask& t : tasks) {
    formats[t.name] = t.format;
    encoders[t.name] = t.params.encoder;
  }
  for (const LayerRecord& r : manifest.layers) {
    for (auto it = r.stats.begin(); it != r.stats.end(); ++it) stats[it.key()] = it.value();
    for (const json& c : r.checks) checks.push_back(c);
    for (const json& sj : r.cb_slices) {
      GRIDQ_ASSIGN_OR_RETURN(CbSlice sl, CbSlice::from_json(sj));
      slices.push_back(std::move(sl));
    }
  }

  // Budget mode: the knapsack over every unit's options, then the final layer shards from the staging files.
  json alloc_j;
  if (o.budget_bpw > 0.0) {
    std::vector<AllocUnit> units;
    std::vector<const json*> unit_js;
    MeasureInputs mi;  // --budget-score measured: where each unit's candidates are staged
    for (const LayerRecord& r : manifest.layers) {
      const json& us = r.extra.at("units");
      for (auto it = us.begin(); it != us.end(); ++it) {
        mi.unit_layer.push_back(r.layer);
        mi.unit_stage_file.push_back(resume_file(r.shard));
        AllocUnit u;
        u.name = it.key();
        u.params = it.value().at("params").get<int64_t>();
        for (const json& op : it.value().at("options"))
          u.options.push_back({op.at("format").get<std::string>(), op.at("bits").get<double>(),
                               op.at("half_trace").get<double>() / static_cast<double>(T)});
        units.push_back(std::move(u));
        unit_js.push_back(&it.value());
      }
    }
    if (units.empty())
      return err("--budget-bpw: the plan has no routed-expert stack (or attention) to allocate");
    AllocPlan ap;
    std::vector<std::vector<double>> sens;  // measured: [unit][option] KL alone
    json measured_j;
    if (o.budget_score == "proxy") {
      GRIDQ_ASSIGN_OR_RETURN(ap, allocate(units, o.budget_bpw));
    } else {
      mi.model = &model;
      mi.calib = &calib;
      mi.threads = o.threads;
      mi.codebooks = &codebooks;
      mi.on_step = [&](const std::string& w) { progress->update("finish", "measure KL", w); };
      GRIDQ_ASSIGN_OR_RETURN(MeasuredResult mr, measure_allocation(units, o.budget_bpw, mi));
      ap = mr.alloc.plan();
      sens = std::move(mr.sens);
      measured_j = std::move(mr.report);
      progress->log(fmt::format("budget {} bpw: {} plan chosen by measured KL ({:.3f} bpw, check KL {:.5f})",
                                o.budget_bpw, mr.alloc.candidates[mr.alloc.chosen].label, ap.bpw,
                                mr.alloc.candidates[mr.alloc.chosen].check_kl));
    }
    alloc_j = {{"budget_bpw", o.budget_bpw},
               {"score", o.budget_score},
               {"bpw", ap.bpw},
               {"cost", ap.cost},
               {"units", json::array()}};
    if (!measured_j.is_null()) alloc_j["measured"] = std::move(measured_j);
    std::map<std::string, std::string> chosen;  // unit -> format
    for (size_t u = 0; u < units.size(); ++u) {
      const int c = ap.choice[u];
      const std::string f = units[u].options[static_cast<size_t>(c)].format;
      chosen[units[u].name] = f;
      json opts = json::array();
      for (size_t k = 0; k < units[u].options.size(); ++k) {
        const AllocOption& op = units[u].options[k];
        opts.push_back({{"format", op.format}, {"bits", op.bits}, {"cost", op.cost}});
        if (!sens.empty()) opts.back()["kl_alone"] = sens[u][k];
      }
      alloc_j["units"].push_back(
          {{"unit", units[u].name}, {"params", units[u].params}, {"format", f}, {"options", opts}});
      const json& op = unit_js[u]->at("options").at(static_cast<size_t>(c));
      for (auto it = op.at("stats").begin(); it != op.at("stats").end(); ++it) stats[it.key()] = it.value();
      for (const json& sj : op.at("cb_slices")) {
        GRIDQ_ASSIGN_OR_RETURN(CbSlice sl, CbSlice::from_json(sj));
        slices.push_back(std::move(sl));
      }
    }
    for (TensorTask& t : tasks) {
      if (!t.budget) continue;
      t.format = chosen.at(t.unit);
      t.params.format = t.format;
      formats[t.name] = t.format;
      encoders[t.name] = encoder_of(t, t.format);
    }
    for (const LayerRecord& r : manifest.layers) {
      progress->update("finish", "assemble", shard_file_name(r.layer, n_layers + 1));
      GRIDQ_ASSIGN_OR_RETURN(auto sf, io::SafetensorsFile::open(resume_file(r.shard)));
      std::vector<StoredTensor> out;
      for (const io::TensorInfo& ti : sf->tensors()) {
        std::string name = ti.name;
        const size_t bar = name.find('|');
        if (bar != std::string::npos) {
          const size_t bar2 = name.find('|', bar + 1);
          const std::string unit = name.substr(0, bar), f = name.substr(bar + 1, bar2 - bar - 1);
          if (chosen.at(unit) != f) continue;
          name = name.substr(bar2 + 1);
        }
        StoredTensor st;
        st.name = name;
        st.dtype = ti.dtype;
        st.shape = ti.shape;
        st.view = ti.bytes();
        out.push_back(std::move(st));
      }
      std::sort(out.begin(), out.end(),
                [](const StoredTensor& a, const StoredTensor& b) { return a.name < b.name; });
      GRIDQ_RETURN_IF_ERROR(write_shard(partial_file(shard_file_name(r.layer, n_layers + 1)), out).status());
    }
    std::sort(slices.begin(), slices.end(),
              [](const CbSlice& a, const CbSlice& b) { return a.source < b.source; });
  }

  ExportInfo info;
  info.source_dir = o.src;
  info.source_config = model.checkpoint->config();
  for (int i = 0; i <= n_layers; ++i) info.shard_files.push_back(shard_file_name(i, n_layers + 1));
  info.tensor_formats = formats;
  for (const auto& [name, format] : formats) {
    if (!is_cb_format(format)) continue;
    const std::string key = book_key_for(codebook_source, format, name);
    auto it = codebooks.find(key);
    if (it == codebooks.end()) return err("tensor '{}': no codebook {}", name, key);
    info.codebooks.emplace(key, it->second);
  }
  info.codebook_source = codebook_source;
  json plan_j = json::object();
  for (const TensorTask& t : tasks)
    plan_j[t.name] = {{"rule", t.rule}, {"format", formats.at(t.name)}, {"encoder", encoders.at(t.name)}};
  int holdout_seqs = 0;
  for (uint8_t h : calib.holdout) holdout_seqs += h ? 1 : 0;
  info.provenance = {
      {"producer", {{"name", "gridq"}, {"version", version_string()}, {"commit", git_commit()}}},
      {"recipe", {{"name", recipe.name}, {"sha256", recipe.sha256}, {"json", recipe.source}}},
      {"method", o.method.empty() ? std::string("recipe") : o.method},
      {"encoders",
       {{"cb_gptq",
         {{"damp", recipe.cb_gptq.damp},
          {"block", recipe.cb_gptq.block},
          {"holdout_gate", recipe.cb_gptq.holdout_gate},
          {"step", recipe.cb_gptq.step},
          {"act_order", recipe.cb_gptq.act_order},
          {"scales", recipe.cb_gptq.scales}}},
        {"two_tier",
         {{"tier", recipe.two_tier.tier},
          {"pilot_rows", recipe.two_tier.pilot_rows},
          {"refits", recipe.two_tier.refits}}}}},
      {"calibration",
       {{"file_sha256", calib.text_sha256},
        {"tokenizer_sha256", calib.tokenizer_sha256},
        {"tokens", calib.tokens()},
        {"seq_len", calib.seq_len},
        {"sequences", calib.n_seq},
        {"holdout_every", recipe.holdout_every},
        {"holdout_sequences", holdout_seqs},
        {"bos", calib.bos},
        {"router_weighted_hessian", recipe.router_weighted_hessian}}},
      {"plan", plan_j},
      {"linear_stats", stats},
      {"identity_checks", checks}};
  if (!alloc_j.is_null()) info.provenance["allocation"] = alloc_j;
  if (!rotation.is_null()) info.provenance["rotation"] = rotation;
  if (recipe.cb_gptq.refine_passes > 0) {  // absent: no refinement (the bytes of earlier artifacts)
    json& g = info.provenance["encoders"]["cb_gptq"];
    g["refine_passes"] = recipe.cb_gptq.refine_passes;
    g["refine_scales"] = recipe.cb_gptq.refine_scales;
  }

  progress->update("finish", "metadata");
  GRIDQ_RETURN_IF_ERROR(write_artifact_metadata(partial, info));
  progress->update("finish", "S7 verify");
  GRIDQ_ASSIGN_OR_RETURN(s.checks, verify_artifact(partial, slices));
  std::error_code ec;
  fs::remove_all(resume_dir, ec);
  if (ec) return err("{}: cannot remove: {}", resume_dir, ec.message());
  GRIDQ_RETURN_IF_ERROR(finalize_artifact(partial, o.out, o.overwrite));

  // Sizes per format from the final artifact's reader view (logical params, on-disk bytes).
  auto art = gridbook::Artifact::open(o.out);
  if (art.ok()) {
    for (const gridbook::ModuleInfo& m : (*art)->modules()) {
      json& f = s.formats[m.format_label()];
      if (!f.is_object()) f = {{"params", int64_t{0}}, {"bytes", uint64_t{0}}};
      f["params"] = f["params"].get<int64_t>() + m.params;
      f["bytes"] = f["bytes"].get<uint64_t>() + m.bytes;
    }
    for (auto it = s.formats.begin(); it != s.formats.end(); ++it) {
      const double p = it.value()["params"].get<double>();
      it.value()["bpw"] = p > 0 ? it.value()["bytes"].get<double>() * 8.0 / p : 0.0;
    }
  }
  s.allocation = alloc_j;
  return Status();
}

}  // namespace gridq::quant::pipeline_detail

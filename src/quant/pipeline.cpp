#include "quant/pipeline.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>

#include "core/device_meter.h"
#include "quant/pipeline_driver.h"

namespace gridq::quant {

using nlohmann::json;
using pipeline_detail::Driver;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------
// The driver

json QuantizeSummary::to_json() const {
  json j = {{"out", out},
            {"finished", finished},
            {"layers", layers},
            {"resumed_at_layer", resumed_at},
            {"calib_tokens", calib_tokens},
            {"seconds", seconds},
            {"peak_rss_bytes", peak_rss_bytes},
            {"peak_device_bytes", peak_device_bytes},
            {"formats", formats},
            {"checks", checks}};
  if (!allocation.is_null()) j["allocation"] = allocation;
  return j;
}

namespace pipeline_detail {

Status Driver::prepare() {
  std::error_code ec;
  if (fs::exists(o.out, ec) && !o.overwrite)
    return err("{}: already exists; refusing to replace it (pass --overwrite)", o.out);
  if (o.out.empty() || o.src.empty()) return err("quantize: SRC and OUT are required");
  if (fs::weakly_canonical(o.out, ec) == fs::weakly_canonical(o.src, ec))
    return err("{}: OUT must differ from SRC", o.out);
  if (o.calib_tokens <= 0 || o.seq_len <= 1) return err("--calib-tokens and --seq-len must be positive");
  if (!o.codebooks.empty() && o.codebooks != "lattice" && o.codebooks != "learned" &&
      o.codebooks != kPerLayerBooks)
    return err("--codebooks '{}': expected lattice, learned or {}", o.codebooks, kPerLayerBooks);
  if (o.budget_bpw < 0.0 || !std::isfinite(o.budget_bpw))
    return err("--budget-bpw must be a positive number");
  if (o.device != "cpu" && o.device != "cuda") return err("--device '{}': expected cpu or cuda", o.device);
  if (o.device == "cuda") {  // refused here, before any work, when there is no usable GPU
    GRIDQ_ASSIGN_OR_RETURN(runtime::DeviceChoice dc, runtime::choose_device("cuda"));
    device_line = dc.log_line +
                  " (quantize: the teacher forward, Hessians, NVFP4-CB K12-K24 CB-GPTQ, refinement and RTN, "
                  "FP8 and FP8-CB GPTQ with block 256 on the GPU; FP8-CB row scales, the other rungs and the "
                  "holdout statistics on the CPU)";
  }
  if (o.budget_score != "measured" && o.budget_score != "proxy")
    return err("--budget-score '{}': expected measured or proxy", o.budget_score);
  if (o.budget_bpw > 0.0 && o.budget_score == "measured") {
    if (o.budget_attention)
      return err(
          "--budget-attention needs --budget-score proxy (measured KL prices routed-expert stacks only)");
    for (const std::string& f : o.budget_formats)
      if (f != "BF16" && !is_cb_format(f))
        return err(
            "--budget-formats {}: --budget-score measured runs CB rungs and BF16 only; pass "
            "--budget-score proxy",
            f);
  }

  GRIDQ_ASSIGN_OR_RETURN(recipe, load_recipe(o.recipe, o.repo_root));
  auto loaded = model::load_model(o.src);
  if (!loaded.ok()) return err("{}: {}", o.src, loaded.message());
  model = std::move(*loaded);
  n_layers = model.spec.n_layers;
  GRIDQ_RETURN_IF_ERROR(check_model_type(recipe, model.checkpoint->config()));
  if (model.checkpoint->config().contains("quantization_config"))
    return err("{}: config.json already has a quantization_config; quantize a BF16 checkpoint", o.src);

  std::vector<SourceTensor> src;
  for (const std::string& n : model.checkpoint->names()) {
    const io::TensorInfo* t = model.checkpoint->find(n);
    src.push_back({n, std::string(io::dtype_name(t->dtype)), t->shape});
  }
  GRIDQ_ASSIGN_OR_RETURN(plan, make_plan(recipe, src, o.strict));
  GRIDQ_ASSIGN_OR_RETURN(tasks, resolve_tasks(recipe, plan, model, o));
  if (o.budget_bpw > 0.0) {                                // feasibility from exact sizes, before any work
    std::map<std::string, std::vector<double>> unit_bits;  // unit -> bits per option
    int64_t params = 0;
    for (const TensorTask& t : tasks) {
      if (!t.budget) continue;
      const io::TensorInfo* ti = model.checkpoint->find(t.name);
      params += ti->numel();
      auto& ub = unit_bits[t.unit];
      ub.resize(t.options.size(), 0.0);
      for (size_t i = 0; i < t.options.size(); ++i) {
        GRIDQ_ASSIGN_OR_RETURN(int64_t b, stored_bits(t.options[i], ti->shape[0], ti->shape[1]));
        ub[i] += static_cast<double>(b);
      }
    }
    if (unit_bits.empty())
      return err(
          "--budget-bpw: the plan has no routed-expert stack (or, with --budget-attention, attention) to "
          "allocate");
    double lo = 0.0, hi = 0.0;
    for (const auto& [u, b] : unit_bits) {
      lo += *std::min_element(b.begin(), b.end());
      hi += *std::max_element(b.begin(), b.end());
    }
    const double p = static_cast<double>(params);
    if (o.budget_bpw < lo / p)
      return err(
          "--budget-bpw {}: the cheapest choice of the {} allocated unit(s) already needs {:.4f} bpw (the "
          "most: {:.4f}); raise the budget or add cheaper --budget-formats",
          o.budget_bpw, unit_bits.size(), lo / p, hi / p);
  }

  // One codebook source for the whole artifact.
  std::set<std::string> sources;
  for (const TensorTask& t : tasks)
    if (is_cb_format(t.format) || t.budget)
      sources.insert(recipe.rules[static_cast<size_t>(t.rule)].codebook);
  if (!o.codebooks.empty()) {
    codebook_source = o.codebooks;
  } else if (sources.size() > 1) {
    return err("recipe '{}': rules mix lattice and learned codebooks; pick one with --codebooks",
               recipe.name);
  } else if (sources.size() == 1) {
    codebook_source = *sources.begin();
  }

  std::error_code fe;
  if (!fs::is_regular_file(o.calib, fe)) return err("--calib {}: not a readable file", o.calib);
  const std::string tok_path = (fs::path(o.src) / "tokenizer.json").string();
  GRIDQ_ASSIGN_OR_RETURN(auto tk, text::Tokenizer::from_file(tok_path));
  tok = std::move(tk);

  // What the bytes depend on (resume refuses when any differs).
  inputs.recipe_sha256 = recipe.sha256;
  json src_j = {{"config", model.checkpoint->config()}, {"tensors", json::array()}};
  for (const SourceTensor& t : src) src_j["tensors"].push_back({t.name, t.dtype, t.shape});
  const std::string sd = src_j.dump();
  inputs.source_sha256 =
      io::sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(sd.data()), sd.size()));
  GRIDQ_ASSIGN_OR_RETURN(inputs.calib_sha256, io::sha256_file(o.calib));
  const json opt_j = {{"calib_tokens", o.calib_tokens},
                      {"budget_formats", o.budget_formats},
                      {"seq_len", o.seq_len},
                      {"method", o.method},
                      // The staged candidates do not depend on the budget's value or score (only
                      // finish() does), so a priced run can be finished at another budget by resuming.
                      {"budget", o.budget_bpw > 0.0},
                      {"budget_attention", o.budget_attention},
                      {"codebooks", codebook_source},
                      {"strict", o.strict},
                      {"rotate", o.rotate},
                      {"rotate_seed", o.rotate_seed},
                      {"gridq_version", version_string()},
                      {"gridq_commit", git_commit()}};
  const std::string od = opt_j.dump();
  inputs.options_sha256 =
      io::sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(od.data()), od.size()));
  partial = o.out + ".partial";
  resume_dir = (fs::path(partial) / kResumeDir).string();
  return Status();
}

Expected<int> Driver::open_partial() {
  std::error_code ec;
  manifest = Manifest{};
  manifest.inputs = inputs;
  if (fs::exists(partial, ec)) {
    if (!o.resume) {
      fs::remove_all(partial, ec);
      if (ec) return err("{}: cannot remove: {}", partial, ec.message());
    } else if (!fs::exists(manifest_path(), ec)) {
      return err("{}: exists but holds no resume manifest ({}); remove it or pass --no-resume", partial,
                 manifest_path());
    } else {
      auto m = Manifest::read(manifest_path());
      if (!m.ok()) return err("{}; pass --no-resume to start over", m.message());
      const std::string d = inputs.diff(m->inputs);
      if (!d.empty())
        return err(
            "{}: a previous run with different inputs is there: the {} differs; refusing to resume (pass "
            "--no-resume to start over)",
            partial, d);
      // The longest prefix of layers whose files still verify, then the latest carry that does.
      size_t k = 0;
      for (; k < m->layers.size(); ++k) {
        const LayerRecord& r = m->layers[k];
        const std::string path = o.budget_bpw > 0 ? resume_file(r.shard) : partial_file(r.shard);
        auto sha = io::sha256_file(path);
        if (!sha.ok() || *sha != r.shard_sha256) break;
      }
      m->layers.resize(k);
      manifest = std::move(*m);
      return static_cast<int>(k);
    }
  }
  fs::create_directories(resume_dir, ec);
  if (ec) return err("{}: cannot create: {}", resume_dir, ec.message());
  GRIDQ_RETURN_IF_ERROR(manifest.write(manifest_path()));
  return 0;
}

}  // namespace pipeline_detail

namespace {

using pipeline_detail::now_seconds;

// The run proper (o.src: the checkpoint to quantize, after --rotate the rotated copy).
Expected<QuantizeSummary> quantize_impl(const QuantizeOptions& o, const json& rotation) {
#if defined(__GLIBC__)
  // Per-layer buffers of megabytes to gigabytes (H, Ŵ, captured rows) come and go every layer: mmap them so a
  // freed one returns to the system (glibc's adaptive threshold would serve them from arenas that only grow).
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
  const double t0 = now_seconds();
  Driver d(o);
  d.rotation = rotation;
  GRIDQ_RETURN_IF_ERROR(d.prepare());
  d.progress = std::make_unique<Progress>(d.n_layers + 1, stderr, o.progress);

  CalibOptions co;
  co.tokens = o.calib_tokens;
  co.seq_len = o.seq_len;
  co.holdout_every = d.recipe.holdout_every;
  d.progress->update("calibration", "tokenize", o.calib);
  auto calib = make_calib_set(o.calib, *d.tok, (fs::path(o.src) / "tokenizer.json").string(), co);
  if (!calib.ok()) return err("--calib {}: {}", o.calib, calib.message());
  d.calib = std::move(*calib);
  for (int i = 0; i < d.calib.n_seq; ++i)
    if (!d.calib.holdout[static_cast<size_t>(i)]) d.T += d.calib.seq_len;
  if (d.T <= 0) return err("--calib {}: every sequence is held out; nothing enters H", o.calib);

  GRIDQ_ASSIGN_OR_RETURN(int start, d.open_partial());
  if (!d.device_line.empty()) d.progress->log(d.device_line);
  d.progress->log(
      fmt::format("quantize {} -> {}: recipe '{}', {} layers, {} calibration tokens ({} x {}), "
                  "codebooks {}{}",
                  o.src, o.out, d.recipe.name, d.n_layers, d.calib.tokens(), d.calib.n_seq, d.calib.seq_len,
                  d.codebook_source, o.method.empty() ? "" : ", method " + o.method));
  if (!rotation.is_null())
    d.progress->log(fmt::format("residual stream rotated ({}) from {}",
                                rotation.at("construction").get<std::string>(),
                                rotation.at("source").get<std::string>()));
  GRIDQ_RETURN_IF_ERROR(d.build_codebooks(start));

  QuantizeSummary s;
  s.out = o.out;
  s.layers = d.n_layers;
  s.calib_tokens = d.calib.tokens();
  GRIDQ_RETURN_IF_ERROR(d.run_layers(start, s));
  if (start >= d.n_layers) {
    d.progress->skip_steps(d.n_layers);
    s.finished = true;
  }
  if (s.finished) {
    GRIDQ_RETURN_IF_ERROR(d.finish(s));
    s.seconds = now_seconds() - t0;
    s.peak_rss_bytes = peak_rss_bytes();
    s.peak_device_bytes = device_bytes_peak();
    d.progress->step_done(
        fmt::format("wrote {} in {}, peak host memory {}{}", o.out, format_duration(s.seconds),
                    format_bytes(s.peak_rss_bytes),
                    s.peak_device_bytes > 0 ? ", GPU " + format_bytes(s.peak_device_bytes) : ""));
  } else {
    s.seconds = now_seconds() - t0;
    s.peak_rss_bytes = peak_rss_bytes();
    s.peak_device_bytes = device_bytes_peak();
    d.progress->log(
        fmt::format("stopped after layer {} as asked; {} holds the state, rerun the same command to "
                    "resume",
                    o.stop_after_layer + 1, d.partial));
  }
  return s;
}

}  // namespace

Expected<QuantizeSummary> quantize(const QuantizeOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (!o.rotate.empty()) {
    json record;
    GRIDQ_ASSIGN_OR_RETURN(QuantizeOptions ro, rotated_options(o, record));
    auto s = quantize_impl(ro, record);  // ro.rotate stays set: it is part of the resume inputs
    std::error_code ec;
    if (s.ok() && s->finished) fs::remove_all(ro.src, ec);
    return s;
  }
  return quantize_impl(o, json());
}

}  // namespace gridq::quant

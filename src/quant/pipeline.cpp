#include "quant/pipeline.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "core/numerics.h"
#include "core/version.h"
#include "gridbook/artifact.h"
#include "io/sha256.h"
#include "quant/allocate.h"
#include "quant/export.h"
#include "quant/lattice_codebook.h"
#include "quant/learned_codebook.h"
#include "quant/manifest.h"
#include "quant/rotate_options.h"
#include "quant/sensitivity.h"
#include "runtime/device.h"
#include "text/tokenizer.h"

namespace gridq::quant {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kResumeDir = "resume";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLearnedBooksFile = "learned_books.pqcb";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string carry_file(int next_layer) { return fmt::format("carry-{:05}.bin", next_layer); }
std::string stage_file(int layer) { return fmt::format("stage-{:05}.safetensors", layer); }

// `--device cuda` runs the teacher forward and the Hessians on the GPU.
StreamerOptions streamer_options(const QuantizeOptions& o, const Recipe& recipe) {
  StreamerOptions so;
  so.threads = o.threads;
  so.router_weighted_hessian = recipe.router_weighted_hessian;
  so.device_hessians = o.device == "cuda";
  so.device_forward = o.device == "cuda";
  return so;
}

json check_to_json(const IdentityCheck& c) {
  return {
      {"input", c.input}, {"kind", c.kind}, {"value", c.value}, {"threshold", c.threshold}, {"pass", c.pass}};
}

}  // namespace

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
            {"formats", formats},
            {"checks", checks}};
  if (!allocation.is_null()) j["allocation"] = allocation;
  return j;
}

namespace {

struct Driver {
  const QuantizeOptions& o;
  Recipe recipe;
  Plan plan;
  model::LoadedModel model;
  std::vector<TensorTask> tasks;
  std::map<std::string, gridbook::Codebook> codebooks;  // rung name -> book
  std::string codebook_source = "lattice";
  std::optional<text::Tokenizer> tok;
  CalibSet calib;
  ResumeInputs inputs;
  Manifest manifest;
  std::string partial, resume_dir;
  int n_layers = 0;
  int64_t T = 0;  // tokens that entered H (non-holdout), the D(u, f) denominator
  std::unique_ptr<Progress> progress;
  std::string device_line;  // --device cuda: which GPU, logged once the progress output exists
  json rotation;            // --rotate: what was folded in (provenance)

  explicit Driver(const QuantizeOptions& opts) : o(opts) {}

  std::string manifest_path() const { return (fs::path(resume_dir) / kManifestFile).string(); }
  std::string partial_file(const std::string& f) const { return (fs::path(partial) / f).string(); }
  std::string resume_file(const std::string& f) const { return (fs::path(resume_dir) / f).string(); }

  // The encoder of a task encoded as `format` (budget options may differ from the rule's format).
  std::string encoder_of(const TensorTask& t, const std::string& format) const {
    return encoder_for(format, t.rule_encoder, t.method);
  }
  // Whether a learned book for CB rung `f` pools this task's weight.
  bool learns_from(const TensorTask& t, const std::string& f) const {
    if (t.format == f && !t.budget) return true;
    if (!t.budget) return false;
    return std::find(t.options.begin(), t.options.end(), f) != t.options.end();
  }

  Status prepare();
  Expected<int> open_partial();  // returns the first layer to compute
  Status build_codebooks(int start_layer);
  Status run_layers(int start, QuantizeSummary& s);
  Status finish(QuantizeSummary& s);
  Status write_layer(int layer, const LayerCapture& cap, std::unique_ptr<LayerStreamer>& st, double fwd_s);
};

Status Driver::prepare() {
  std::error_code ec;
  if (fs::exists(o.out, ec) && !o.overwrite)
    return err("{}: already exists; refusing to replace it (pass --overwrite)", o.out);
  if (o.out.empty() || o.src.empty()) return err("quantize: SRC and OUT are required");
  if (fs::weakly_canonical(o.out, ec) == fs::weakly_canonical(o.src, ec))
    return err("{}: OUT must differ from SRC", o.out);
  if (o.calib_tokens <= 0 || o.seq_len <= 1) return err("--calib-tokens and --seq-len must be positive");
  if (!o.codebooks.empty() && o.codebooks != "lattice" && o.codebooks != "learned")
    return err("--codebooks '{}': expected lattice or learned", o.codebooks);
  if (o.budget_bpw < 0.0 || !std::isfinite(o.budget_bpw))
    return err("--budget-bpw must be a positive number");
  if (o.device != "cpu" && o.device != "cuda") return err("--device '{}': expected cpu or cuda", o.device);
  if (o.device == "cuda") {  // refused here, before any work, when there is no usable GPU
    GRIDQ_ASSIGN_OR_RETURN(runtime::DeviceChoice dc, runtime::choose_device("cuda"));
    device_line = dc.log_line +
                  " (quantize: the teacher forward, Hessians, NVFP4-CB K12/K16 CB-GPTQ, refinement and RTN "
                  "on the GPU; FP8, the other rungs and the holdout statistics on the CPU)";
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

Status Driver::build_codebooks(int start_layer) {
  std::set<std::string> rungs;
  for (const TensorTask& t : tasks) {
    if (is_cb_format(t.format)) rungs.insert(t.format);
    if (t.budget)
      for (const std::string& f : t.options)
        if (is_cb_format(f)) rungs.insert(f);
  }
  if (codebook_source == "lattice") {
    for (const std::string& f : rungs) {
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(f, 2));
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb, lattice_codebook(r));
      codebooks.emplace(f, std::move(cb));
    }
    return Status();
  }
  // Learned pooled books need diag(H) of every routed matrix before any is encoded: one capture-only pass
  // over all layers (quantizer.md §3). The books are kept in resume/ so a resumed run does not redo it.
  const std::string books_path = resume_file(kLearnedBooksFile);
  std::error_code ec;
  if (start_layer > 0 && fs::exists(books_path, ec)) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Sidecar sc, gridbook::Sidecar::read(books_path));
    for (const std::string& f : rungs) {
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(f, 2));
      std::vector<std::span<const uint16_t>> spans;
      for (int i = 0; i < r.n_sub(); ++i) {
        const gridbook::CodebookTable* t = sc.find(gridbook::codebook_table_name(kLearnedBookRef, r, i));
        if (!t) return err("{}: no learned table for {} sub{}; pass --no-resume", books_path, f, i);
        spans.emplace_back(t->f16);
      }
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb,
                             gridbook::Codebook::from_f16_tables(r, spans, books_path));
      codebooks.emplace(f, std::move(cb));
    }
    return Status();
  }
  std::map<std::string, std::unique_ptr<CodebookLearner>> learners;
  for (const std::string& f : rungs) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(f, 2));
    int64_t cw = 0;
    for (const TensorTask& t : tasks) {
      if (!learns_from(t, f)) continue;
      const io::TensorInfo* ti = model.checkpoint->find(t.name);
      cw += ti->shape[0] * ti->shape[1] / 8;
    }
    LearnOptions lo;
    lo.two_tier.pilot_rows = recipe.two_tier.pilot_rows;
    lo.two_tier.refits = recipe.two_tier.refits;
    GRIDQ_ASSIGN_OR_RETURN(learners[f], CodebookLearner::create(r, cw, lo));
  }
  GRIDQ_ASSIGN_OR_RETURN(auto st, LayerStreamer::create(o.src, calib, streamer_options(o, recipe)));
  for (int l = 0; l < n_layers; ++l) {
    progress->update(fmt::format("books: layer {}/{}", l + 1, n_layers), "capture");
    GRIDQ_ASSIGN_OR_RETURN(LayerCapture cap, st->run_layer());
    for (const TensorTask& t : tasks) {
      if (t.layer != l) continue;
      for (auto& [f, learner] : learners) {
        if (!learns_from(t, f)) continue;
        GRIDQ_ASSIGN_OR_RETURN(const InputStats* in, input_for_role(cap, t.role));
        GRIDQ_ASSIGN_OR_RETURN(SourceWeight w, source_weight(*model.checkpoint, t.name));
        GRIDQ_ASSIGN_OR_RETURN(std::vector<float> W, source_to_f32(w));
        LearnInput li{W.data(),           static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]),
                      in->imatrix.data(), static_cast<double>(in->n),   t.name};
        GRIDQ_RETURN_IF_ERROR(learner->add(li));
      }
    }
  }
  std::vector<gridbook::CodebookTable> tables;
  for (auto& [f, learner] : learners) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb, learner->finish());
    for (int i = 0; i < cb.rung.n_sub(); ++i) {
      gridbook::CodebookTable t;
      t.name = gridbook::codebook_table_name(kLearnedBookRef, cb.rung, i);
      t.cols = cb.rung.sub_dim();
      t.rows = static_cast<int64_t>(cb.sub[static_cast<size_t>(i)].size()) / t.cols;
      for (float v : cb.sub[static_cast<size_t>(i)]) t.f16.push_back(f32_to_f16(v));
      t.sha256 = gridbook::codebook_digest(t.f16);
      tables.push_back(std::move(t));
    }
    codebooks.emplace(f, std::move(cb));
  }
  std::sort(tables.begin(), tables.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  GRIDQ_RETURN_IF_ERROR(gridbook::write_sidecar(books_path, tables));
  progress->log(fmt::format("learned codebooks: {} rung(s) from a capture pass over {} layers",
                            learners.size(), n_layers));
  return Status();
}

Status Driver::write_layer(int l, const LayerCapture& cap, std::unique_ptr<LayerStreamer>& st, double fwd_s) {
  const double t_enc = now_seconds();
  auto label = fmt::format("layer {}/{}", l + 1, n_layers);
  auto on_tensor = [&](const std::string& n) { progress->update(label, "encode", n); };
  EncodeSeconds es;
  GRIDQ_ASSIGN_OR_RETURN(std::vector<EncodedTensor> base,
                         encode_layer_tensors(tasks, l, &cap, *model.checkpoint, codebooks, on_tensor, &es));
  const double t_tensors = now_seconds() - t_enc;
  LayerRecord rec;
  rec.layer = l;
  int cold = 0, kept_nn = 0, n_quant = 0;
  auto note = [&](const LinearStats& s) {
    if (s.format == "BF16") return;
    ++n_quant;
    cold += s.cold ? 1 : 0;
    kept_nn += s.gate == "kept_nn" ? 1 : 0;
  };
  for (const EncodedTensor& e : base) {
    rec.stats[e.stats.tensor] = e.stats.to_json();
    note(e.stats);
  }
  for (const IdentityCheck& c : cap.checks) rec.checks.push_back(check_to_json(c));
  const size_t n_tensors = base.size();
  int n_tensors_budget = 0;  // tensors whose format the allocator picks at the end
  GRIDQ_ASSIGN_OR_RETURN(ShardContent content, assemble_tensors(std::move(base)));
  for (const CbSlice& s : content.cb_slices) rec.cb_slices.push_back(s.to_json());

  if (o.budget_bpw > 0.0) {
    // Every option of every budget unit of this layer, staged under "<unit>|<format>|<name>".
    auto on_option = [&](const std::string& f, const std::string& n) {
      progress->update(label, "budget " + f, n);
    };
    GRIDQ_ASSIGN_OR_RETURN(std::vector<BudgetUnit> bus,
                           encode_budget_units(tasks, l, cap, *model.checkpoint, codebooks, on_option));
    json ujs = json::object();
    for (const TensorTask& t : tasks) {
      if (t.layer != l || !t.budget) continue;
      ++n_tensors_budget;
    }
    for (BudgetUnit& bu : bus) {
      json uj = {{"params", bu.params}, {"options", json::array()}};
      for (BudgetOption& op : bu.options) {
        json slices = json::array();
        for (const CbSlice& s : op.cb_slices) slices.push_back(s.to_json());
        uj["options"].push_back({{"format", op.format},
                                 {"bits", op.bits},
                                 {"half_trace", op.half_trace},
                                 {"stats", op.stats},
                                 {"cb_slices", slices}});
        for (StoredTensor& t : op.tensors) {
          t.name = bu.unit + "|" + op.format + "|" + t.name;
          content.tensors.push_back(std::move(t));
        }
      }
      ujs[bu.unit] = std::move(uj);
    }
    rec.extra["units"] = std::move(ujs);
    std::sort(content.tensors.begin(), content.tensors.end(),
              [](const StoredTensor& a, const StoredTensor& b) { return a.name < b.name; });
    rec.shard = stage_file(l);
    GRIDQ_ASSIGN_OR_RETURN(rec.shard_sha256, write_shard(resume_file(rec.shard), content.tensors));
  } else {
    rec.shard = shard_file_name(l, n_layers + 1);
    GRIDQ_ASSIGN_OR_RETURN(rec.shard_sha256, write_shard(partial_file(rec.shard), content.tensors));
  }
  const double enc_s = now_seconds() - t_enc;
  if (es.expert_device > 0)
    progress->log(fmt::format(
        "layer {}/{}: encode {}: routed experts on the GPU {} (device {}, host {}, output "
        "proxies {}), the other tensors {}, assemble and write {}",
        l + 1, n_layers, format_duration(enc_s),
        format_duration(es.expert_device + es.expert_host + es.expert_proxy),
        format_duration(es.expert_device), format_duration(es.expert_host), format_duration(es.expert_proxy),
        format_duration(es.other), format_duration(enc_s - t_tensors)));

  // The carry h_{l+1} (the input of the next layer); keep the last two.
  if (l + 1 < n_layers) {
    progress->update(label, "carry");
    rec.carry = carry_file(l + 1);
    GRIDQ_RETURN_IF_ERROR(st->save_carry(resume_file(rec.carry)));
    rec.carry_sha256 = st->carry_sha256();
  }
  manifest.layers.push_back(std::move(rec));
  GRIDQ_RETURN_IF_ERROR(manifest.write(manifest_path()));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(resume_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with("carry-") && n != carry_file(l + 1) && n != carry_file(l)) fs::remove(entry.path(), ec);
  }

  const double tps = fwd_s > 0 ? static_cast<double>(calib.tokens()) / fwd_s : 0.0;
  progress->step_done(fmt::format(
      "layer {}/{}: forward+capture {} ({:.0f} tok/s{}), encode {} ({} tensors, {} "
      "quantized{}, {} cold, {} gate fallbacks), peak host memory {}{}",
      l + 1, n_layers, format_duration(fwd_s), tps,
      cap.teacher_steps_s > 0
          ? fmt::format("; GPU teacher: upload {}, steps {}, hooks {}", format_duration(cap.teacher_upload_s),
                        format_duration(cap.teacher_steps_s), format_duration(cap.teacher_hooks_s))
          : "",
      format_duration(enc_s), n_tensors + n_tensors_budget, n_quant,
      n_tensors_budget ? fmt::format(", {} priced for the budget", n_tensors_budget) : "", cold, kept_nn,
      format_bytes(peak_rss_bytes()),
      st->peak_device_bytes() > 0 ? ", GPU teacher " + format_bytes(st->peak_device_bytes()) : ""));
  return Status();
}

Status Driver::run_layers(int start, QuantizeSummary& s) {
  s.resumed_at = start;
  if (start >= n_layers) return Status();
  GRIDQ_ASSIGN_OR_RETURN(auto st, LayerStreamer::create(o.src, calib, streamer_options(o, recipe)));
  // Resume at the latest layer whose carry verifies (the last two are kept); layer 0 needs none.
  while (start > 0) {
    const LayerRecord& prev = manifest.layers[static_cast<size_t>(start - 1)];
    const std::string path = resume_file(prev.carry);
    Status ls = prev.carry.empty() ? Status(err("no carry recorded")) : st->load_carry(path, start);
    if (ls.ok() && st->carry_sha256() == prev.carry_sha256) break;
    progress->log(fmt::format("resume: the carry into layer {} does not verify ({}); stepping back one layer",
                              start + 1, ls.ok() ? "SHA-256 mismatch" : ls.message()));
    --start;
    manifest.layers.resize(static_cast<size_t>(start));
  }
  if (start == 0 && !manifest.layers.empty()) manifest.layers.clear();
  if (start == 0 && s.resumed_at > 0) {  // nothing usable: a fresh streamer from the embeddings
    GRIDQ_ASSIGN_OR_RETURN(st, LayerStreamer::create(o.src, calib, streamer_options(o, recipe)));
  }
  s.resumed_at = start;
  progress->skip_steps(start);
  if (start > 0)
    progress->log(fmt::format("resuming {} at layer {}/{} (layers 1-{} verified)", partial, start + 1,
                              n_layers, start));
  for (int l = start; l < n_layers; ++l) {
    progress->update(fmt::format("layer {}/{}", l + 1, n_layers), "forward+capture");
    const double t = now_seconds();
    auto cap = st->run_layer();
    if (!cap.ok()) return err("layer {}: {}", l, cap.message());
    progress->log(fmt::format(
        "layer {}/{}: captured in {} ({}absorb {}, S4 checks {}, finish {})", l + 1, n_layers,
        format_duration(cap->seconds),
        cap->teacher_steps_s > 0
            ? fmt::format("GPU teacher: upload {}, steps {}, hooks {}; ",
                          format_duration(cap->teacher_upload_s), format_duration(cap->teacher_steps_s),
                          format_duration(cap->teacher_hooks_s))
            : "",
        format_duration(cap->absorb_s), format_duration(cap->checks_s), format_duration(cap->finish_s)));
    GRIDQ_RETURN_IF_ERROR(write_layer(l, *cap, st, now_seconds() - t));
    // With --budget-bpw the hook may also stop after the last layer: every candidate priced, none chosen.
    if (o.stop_after_layer == l && (l + 1 < n_layers || o.budget_bpw > 0.0)) {
      s.finished = false;
      return Status();
    }
  }
  s.finished = true;
  return Status();
}

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
  for (const auto& entry : formats) {
    if (is_cb_format(entry.second)) info.codebooks.emplace(entry.second, codebooks.at(entry.second));
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
    d.progress->step_done(fmt::format("wrote {} in {}, peak host memory {}", o.out,
                                      format_duration(s.seconds), format_bytes(s.peak_rss_bytes)));
  } else {
    s.seconds = now_seconds() - t0;
    s.peak_rss_bytes = peak_rss_bytes();
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

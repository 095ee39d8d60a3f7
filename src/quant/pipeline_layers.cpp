// The layer steps of the quantize driver (pipeline_driver.h): codebooks, then per layer the capture and the
// encode.
#include <algorithm>
#include <future>
#include <set>

#include "core/async.h"
#include "core/device_meter.h"
#include "quant/pipeline_driver.h"

namespace gridq::quant::pipeline_detail {

using nlohmann::json;

namespace {

// ", GPU peak 41.2 GiB (teacher 8.3 GiB)": the most device memory gridq's buffers held at once so far (the
// teacher and the encoders of overlapped layers together), and the teacher's own peak; "" on the CPU path.
std::string gpu_memory(size_t teacher_peak) {
  const int64_t peak = device_bytes_peak();
  if (peak <= 0) return "";
  return fmt::format(
      ", GPU peak {}{}", format_bytes(peak),
      teacher_peak > 0 ? " (teacher " + format_bytes(static_cast<int64_t>(teacher_peak)) + ")" : "");
}

}  // namespace

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
  // Learned books need diag(H) of every routed matrix before any is encoded: one capture-only pass over all
  // layers (quantizer.md §3). Pooled: one book per rung; per layer: one per (rung, layer), keyed book_key.
  // The books are kept in resume/ so a resumed run does not redo it.
  const bool per_layer = codebook_source == kPerLayerBooks;
  struct Book {
    std::string rung;  // format name
    int layer = -1;    // per-layer books only
  };
  std::map<std::string, Book> books;  // codebooks key -> what it is
  for (const std::string& f : rungs)
    for (const TensorTask& t : tasks)
      if (learns_from(t, f)) books[book_key_for(codebook_source, f, t.layer)] = {f, per_layer ? t.layer : -1};
  auto ref_of = [&](const Book& b) { return book_ref(codebook_source, b.layer); };
  const std::string books_path = resume_file(kLearnedBooksFile);
  std::error_code ec;
  if (start_layer > 0 && fs::exists(books_path, ec)) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Sidecar sc, gridbook::Sidecar::read(books_path));
    for (const auto& [key, b] : books) {
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(b.rung, 2));
      std::vector<std::span<const uint16_t>> spans;
      for (int i = 0; i < r.n_sub(); ++i) {
        const gridbook::CodebookTable* t = sc.find(gridbook::codebook_table_name(ref_of(b), r, i));
        if (!t) return err("{}: no learned table for {} sub{}; pass --no-resume", books_path, key, i);
        spans.emplace_back(t->f16);
      }
      GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb,
                             gridbook::Codebook::from_f16_tables(r, spans, books_path));
      codebooks.emplace(key, std::move(cb));
    }
    return Status();
  }
  std::map<std::string, std::unique_ptr<CodebookLearner>> learners;  // by codebooks key
  for (const auto& [key, b] : books) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(b.rung, 2));
    int64_t cw = 0;
    for (const TensorTask& t : tasks) {
      if (!learns_from(t, b.rung) || (b.layer >= 0 && t.layer != b.layer)) continue;
      const io::TensorInfo* ti = model.checkpoint->find(t.name);
      cw += ti->shape[0] * ti->shape[1] / 8;
    }
    LearnOptions lo;
    lo.two_tier.pilot_rows = recipe.two_tier.pilot_rows;
    lo.two_tier.refits = recipe.two_tier.refits;
    GRIDQ_ASSIGN_OR_RETURN(learners[key], CodebookLearner::create(r, cw, lo));
  }
  GRIDQ_ASSIGN_OR_RETURN(auto st, LayerStreamer::create(o.src, calib, streamer_options(o, recipe)));
  for (int l = 0; l < n_layers; ++l) {
    progress->update(fmt::format("books: layer {}/{}", l + 1, n_layers), "capture");
    GRIDQ_ASSIGN_OR_RETURN(LayerCapture cap, st->run_layer());
    for (const TensorTask& t : tasks) {
      if (t.layer != l) continue;
      for (const std::string& f : rungs) {
        if (!learns_from(t, f)) continue;
        GRIDQ_ASSIGN_OR_RETURN(const InputStats* in, input_for_role(cap, t.role));
        GRIDQ_ASSIGN_OR_RETURN(SourceWeight w, source_weight(*model.checkpoint, t.name));
        GRIDQ_ASSIGN_OR_RETURN(std::vector<float> W, source_to_f32(w));
        LearnInput li{W.data(),           static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]),
                      in->imatrix.data(), static_cast<double>(in->n),   t.name};
        GRIDQ_RETURN_IF_ERROR(learners.at(book_key_for(codebook_source, f, l))->add(li));
      }
    }
  }
  std::vector<gridbook::CodebookTable> tables;
  for (auto& [key, learner] : learners) {
    GRIDQ_ASSIGN_OR_RETURN(gridbook::Codebook cb, learner->finish());
    for (gridbook::CodebookTable& t : codebook_tables(cb, ref_of(books.at(key))))
      tables.push_back(std::move(t));
    codebooks.emplace(key, std::move(cb));
  }
  std::sort(tables.begin(), tables.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  GRIDQ_RETURN_IF_ERROR(gridbook::write_sidecar(books_path, tables));
  progress->log(fmt::format("learned codebooks: {} book(s) for {} rung(s) from a capture pass over {} layers",
                            learners.size(), rungs.size(), n_layers));
  return Status();
}

Status Driver::write_layer(int l, const LayerCapture& cap, const SavedCarry& carry, size_t device_peak,
                           double fwd_s) {
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

  std::string shard_path;  // staged in resume/ with --budget-bpw (the allocator picks at the end)
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
    shard_path = resume_file(rec.shard);
  } else {
    rec.shard = shard_file_name(l, n_layers + 1);
    shard_path = partial_file(rec.shard);
  }
  // The previous layer's shard is complete before this one's starts (one writer, one layer held).
  const double t_assembled = now_seconds();
  GRIDQ_RETURN_IF_ERROR(commit_layer());
  const double waited = now_seconds() - t_assembled;
  shard_write = async_like_caller(
      [shard_path, tensors = std::move(content.tensors)] { return write_shard(shard_path, tensors); });
  const double enc_s = now_seconds() - t_enc;
  if (es.expert_device > 0)
    progress->log(fmt::format(
        "layer {}/{}: encode {}: routed experts on the GPU {} (device {}, host {}, output "
        "proxies {}), the other tensors {}, assemble {}, waiting for the previous layer's shard {}",
        l + 1, n_layers, format_duration(enc_s),
        format_duration(es.expert_device + es.expert_host + es.expert_proxy),
        format_duration(es.expert_device), format_duration(es.expert_host), format_duration(es.expert_proxy),
        format_duration(es.other), format_duration(t_assembled - t_enc - t_tensors),
        format_duration(waited)));

  // The carry h_{l+1} (the input of the next layer, saved by run_layers).
  rec.carry = carry.file;
  rec.carry_sha256 = carry.sha256;
  shard_rec = std::move(rec);

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
      format_bytes(peak_rss_bytes()), gpu_memory(device_peak)));
  return Status();
}

Status Driver::commit_layer() {
  if (!shard_write.valid()) return Status();
  Expected<std::string> sha = shard_write.get();
  if (!sha.ok()) return err("layer {}: {}", shard_rec.layer + 1, sha.message());
  shard_rec.shard_sha256 = *sha;
  const int l = shard_rec.layer;
  manifest.layers.push_back(std::move(shard_rec));
  GRIDQ_RETURN_IF_ERROR(manifest.write(manifest_path()));
  // Carries older than this layer's input are no longer needed to resume (the newer ones may already be
  // saved: the capture runs ahead of the write).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(resume_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with("carry-") && n < carry_file(l)) fs::remove(entry.path(), ec);
  }
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
  // Overlapped layers: the capture of layer l+1 (a pure function of the checkpoint, the calibration set and
  // the carry, capture.h) runs on a second thread while layer l is encoded, so the GPU teacher and the
  // encoders share the machine instead of taking turns. The bytes are the serial run's; the cost is a second
  // layer's statistics in host memory.
  const bool overlap = o.overlap_capture == "on" || (o.overlap_capture == "auto" && o.device == "cuda");
  std::future<Expected<LayerCapture>> next;
  for (int l = start; l < n_layers; ++l) {
    progress->update(fmt::format("layer {}/{}", l + 1, n_layers), "forward+capture");
    const double t = now_seconds();
    const bool prefetched = next.valid();
    auto cap = prefetched ? next.get() : st->run_layer();
    if (!cap.ok()) return err("layer {}: {}", l, cap.message());
    // An overlapped capture's own wall time (it started during the previous layer's encode).
    const double waited = now_seconds() - t;
    const double fwd_s = prefetched ? cap->seconds : waited;
    SavedCarry carry;
    if (l + 1 < n_layers) {
      carry.file = carry_file(l + 1);
      GRIDQ_RETURN_IF_ERROR(st->save_carry(resume_file(carry.file)));
      carry.sha256 = st->carry_sha256();
    }
    const size_t device_peak = st->peak_device_bytes();
    const bool stop_here = o.stop_after_layer == l && (l + 1 < n_layers || o.budget_bpw > 0.0);
    if (overlap && l + 1 < n_layers && !stop_here) {
      next = async_like_caller([&st] { return st->run_layer(); });
    }
    progress->log(fmt::format(
        "layer {}/{}: captured in {} ({}absorb {}, S4 checks {}, finish {}{})", l + 1, n_layers,
        format_duration(cap->seconds),
        cap->teacher_steps_s > 0
            ? fmt::format("GPU teacher: upload {}, steps {}, hooks {}; ",
                          format_duration(cap->teacher_upload_s), format_duration(cap->teacher_steps_s),
                          format_duration(cap->teacher_hooks_s))
            : "",
        format_duration(cap->absorb_s), format_duration(cap->checks_s), format_duration(cap->finish_s),
        prefetched ? fmt::format("; overlapped with the previous encode, {} waited", format_duration(waited))
                   : ""));
    GRIDQ_RETURN_IF_ERROR(write_layer(l, *cap, carry, device_peak, fwd_s));
    // With --budget-bpw the hook may also stop after the last layer: every candidate priced, none chosen.
    if (stop_here) {
      s.finished = false;
      return commit_layer();
    }
  }
  s.finished = true;
  return commit_layer();
}

}  // namespace gridq::quant::pipeline_detail

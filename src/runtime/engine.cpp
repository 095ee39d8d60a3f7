#include "runtime/engine.h"

#include <filesystem>

#include "runtime/artifact_weights.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {

Expected<std::unique_ptr<Engine>> Engine::open(const std::string& model_dir, const EngineOptions& opts) {
  if (opts.backend != "cpu") return err("engine: backend '{}' is not available here (use cpu)", opts.backend);
  if (opts.prefill_chunk <= 0) return err("engine: prefill_chunk must be > 0 (got {})", opts.prefill_chunk);
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json cfg,
                         io::read_json_file((std::filesystem::path(model_dir) / "config.json").string()));
  if (cfg.contains("quantization_config")) {
    // A gridbook artifact: FP8 / CB weights straight from the mmapped files.
    GRIDQ_ASSIGN_OR_RETURN(std::shared_ptr<ArtifactModel> am, load_artifact_model(model_dir));
    GRIDQ_ASSIGN_OR_RETURN(auto be, cpu::CpuBackend::create(am->spec, am->weights, am, cpu::CpuOptions{opts.threads}));
    auto e = from_backend(std::move(be), opts);
    e->model_dir_ = model_dir;
    return e;
  }
  GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel lm, model::load_model(model_dir));
  GRIDQ_ASSIGN_OR_RETURN(ModelWeights w, build_model_weights(lm.spec, lm.weights));
  std::shared_ptr<void> keep(std::move(lm.checkpoint));
  GRIDQ_ASSIGN_OR_RETURN(auto be, cpu::CpuBackend::create(lm.spec, std::move(w), keep, cpu::CpuOptions{opts.threads}));
  auto e = from_backend(std::move(be), opts);
  e->model_dir_ = model_dir;
  return e;
}

std::unique_ptr<Engine> Engine::from_backend(std::unique_ptr<Backend> backend, const EngineOptions& opts) {
  std::unique_ptr<Engine> e(new Engine());
  e->backend_ = std::move(backend);
  e->opts_ = opts;
  if (e->opts_.prefill_chunk <= 0) e->opts_.prefill_chunk = 512;
  return e;
}

SeqId Engine::create_sequence() {
  const SeqId id = next_id_++;
  Status st = backend_->add_sequence(id);  // ids are fresh, so this cannot collide
  (void)st;
  return id;
}

void Engine::free_sequence(SeqId id) { backend_->remove_sequence(id); }

Expected<std::vector<float>> Engine::prefill(SeqId id, std::span<const int32_t> tokens, LogitsMode mode) {
  std::vector<float> out;
  if (tokens.empty()) return err("engine: prefill of sequence {} with no tokens", id);
  const size_t chunk = static_cast<size_t>(opts_.prefill_chunk);
  for (size_t s = 0; s < tokens.size(); s += chunk) {
    const size_t n = std::min(chunk, tokens.size() - s);
    const bool last = s + n == tokens.size();
    BatchItem it{id, tokens.subspan(s, n),
                 mode == LogitsMode::kAll ? LogitsMode::kAll : (last ? mode : LogitsMode::kNone)};
    GRIDQ_RETURN_IF_ERROR(backend_->forward(std::span<const BatchItem>(&it, 1), out));
  }
  return out;
}

Expected<std::vector<float>> Engine::decode(std::span<const SeqId> seqs, std::span<const int32_t> tokens) {
  if (seqs.size() != tokens.size())
    return err("engine: decode got {} sequences and {} tokens", seqs.size(), tokens.size());
  std::vector<BatchItem> items;
  items.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) items.push_back(BatchItem{seqs[i], tokens.subspan(i, 1), LogitsMode::kLast});
  return forward(items);
}

Expected<std::vector<float>> Engine::forward(std::span<const BatchItem> items) {
  std::vector<float> out;
  GRIDQ_RETURN_IF_ERROR(backend_->forward(items, out));
  return out;
}

}  // namespace gridq::runtime

#include "runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "runtime/artifact_weights.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/model_weights.h"

namespace gridq::runtime {

namespace {

Status check_device_options(const DeviceOptions& d) {
  if (!(d.gpu_memory_utilization > 0.0 && d.gpu_memory_utilization <= 1.0))
    return err("engine: gpu_memory_utilization must be in (0, 1] (got {})", d.gpu_memory_utilization);
  if (d.max_model_len < 0) return err("engine: max_model_len must be >= 0 (got {})", d.max_model_len);
  if (d.max_num_seqs < 1) return err("engine: max_num_seqs must be >= 1 (got {})", d.max_num_seqs);
  if (d.num_gpu_blocks_override < 0)
    return err("engine: num_gpu_blocks_override must be >= 0 (got {})", d.num_gpu_blocks_override);
  return Status::ok_status();
}

// --cpu-kernels as the CPU backend's choice, refused where this CPU cannot run it (before any weight is
// read).
Expected<cpu::CpuKernels> cpu_kernels_of(const std::string& name) {
  if (name == "reference") return cpu::CpuKernels::kReference;
  if (name == "auto") return cpu::have_avx512_bf16() ? cpu::CpuKernels::kBf16 : cpu::CpuKernels::kReference;
  if (name != "bf16") return err("engine: cpu kernels '{}': expected reference, bf16 or auto", name);
  if (!cpu::have_avx512_bf16())
    return err(
        "engine: --cpu-kernels bf16 needs AVX512-BF16 (vdpbf16ps), which this CPU does not have; "
        "use --cpu-kernels reference or auto");
  return cpu::CpuKernels::kBf16;
}

// "; cpu kernels bf16 (auto: this CPU has AVX512-BF16; activations rounded to BF16)", "; cpu kernels
// reference (AVX-512)", as the start-up line reports it: which dot products run, and why when auto chose.
std::string cpu_kernels_log(const std::string& name, cpu::CpuKernels k) {
  if (k == cpu::CpuKernels::kBf16)
    return fmt::format("; cpu kernels bf16 ({}activations rounded to BF16)",
                       name == "auto" ? "auto: this CPU has AVX512-BF16; " : "");
  const char* isa = cpu::have_avx512() ? "AVX-512" : cpu::have_avx2() ? "AVX2" : "scalar";
  return fmt::format("; cpu kernels reference ({}{})",
                     name == "auto" ? "auto: this CPU has no AVX512-BF16; " : "", isa);
}

// The backend for the chosen device over host weights; `keepalive` owns what the weights point into.
Expected<std::unique_ptr<Backend>> make_backend(DeviceKind kind, const model::ModelSpec& spec, ModelWeights w,
                                                std::shared_ptr<void> keepalive, const EngineOptions& opts,
                                                cpu::CpuKernels kernels, cpu::WeightPages pages,
                                                std::string* log_line) {
  if (kind == DeviceKind::kCuda) {
    const CudaBackendHooks* hooks = cuda_backend_hooks();
    // choose_device only picks CUDA with hooks registered; a null here means they were cleared since.
    if (!hooks) return err("engine: the CUDA backend was chosen but is no longer registered");
    return hooks->create(spec, w, std::move(keepalive), opts.dev);
  }
  cpu::CpuOptions co;
  co.threads = opts.threads;
  co.kernels = kernels;
  co.weight_pages = pages;
  if (opts.dev.num_gpu_blocks_override > 0) {
    co.kv_pages = opts.dev.num_gpu_blocks_override;
  } else if (opts.dev.cpu_kv_budget) {
    const int64_t len = opts.dev.max_model_len > 0 ? opts.dev.max_model_len : spec.max_position_embeddings;
    co.kv_pages = static_cast<int64_t>(opts.dev.max_num_seqs) * ((std::max<int64_t>(len, 1) + 15) / 16);
  }
  GRIDQ_ASSIGN_OR_RETURN(auto be, cpu::CpuBackend::create(spec, std::move(w), std::move(keepalive), co));
  *log_line += "; " + be->weight_pages_report();
  return std::unique_ptr<Backend>(std::move(be));
}

// "; activation contract w4a16 (override; the artifact's is w4a4) on 36 FP4-CB matrices", as the start-up
// line reports it.
std::string contract_log(const std::string& contract, int64_t n_fp4) {
  if (n_fp4 == 0)
    return contract.empty()
               ? std::string()
               : fmt::format("; activation contract {}: no FP4-CB layers, nothing changes", contract);
  const std::string c = contract.empty() ? "w4a4" : contract;
  return fmt::format("; activation contract {} ({}) on {} FP4-CB matrices", c,
                     contract.empty()
                         ? "the artifact's"
                         : (c == "w4a4" ? "the artifact's, as asked" : "override; the artifact's is w4a4"),
                     n_fp4);
}

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::open(const std::string& model_dir, const EngineOptions& opts) {
  if (opts.prefill_chunk < 0)
    return err("engine: prefill_chunk must be >= 0 (got {}; 0 = by device)", opts.prefill_chunk);
  GRIDQ_RETURN_IF_ERROR(check_device_options(opts.dev));
  // Before any weight is read: a refused device costs nothing.
  GRIDQ_ASSIGN_OR_RETURN(DeviceChoice choice, choose_device(opts.device));
  if (!opts.synthetic.empty()) return open_synthetic(model_dir, opts, std::move(choice));
  cpu::CpuKernels kernels = cpu::CpuKernels::kReference;
  cpu::WeightPages pages = cpu::WeightPages::kMapped;
  if (choice.kind == DeviceKind::kCpu) {
    GRIDQ_ASSIGN_OR_RETURN(kernels, cpu_kernels_of(opts.cpu_kernels));
    GRIDQ_ASSIGN_OR_RETURN(pages, cpu::weight_pages_of(opts.cpu_weights));
    choice.log_line += cpu_kernels_log(opts.cpu_kernels, kernels);
  }
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json cfg,
                         io::read_json_file((std::filesystem::path(model_dir) / "config.json").string()));
  std::unique_ptr<Backend> be;
  const std::string& contract = opts.activation_contract;
  if (!contract.empty() && contract != "w4a4" && contract != "w4a16")
    return err("engine: activation contract '{}': expected w4a4 or w4a16", contract);
  if (cfg.contains("quantization_config")) {
    // A gridbook artifact: FP8 / CB weights straight from the mmapped files.
    GRIDQ_ASSIGN_OR_RETURN(std::shared_ptr<ArtifactModel> am, load_artifact_model(model_dir));
    GRIDQ_ASSIGN_OR_RETURN(int64_t n_fp4, set_activation_contract(am->weights, contract));
    choice.log_line += contract_log(contract, n_fp4);
    GRIDQ_ASSIGN_OR_RETURN(
        be, make_backend(choice.kind, am->spec, am->weights, am, opts, kernels, pages, &choice.log_line));
  } else {
    GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel lm, model::load_model(model_dir));
    GRIDQ_ASSIGN_OR_RETURN(ModelWeights w, build_model_weights(lm.spec, lm.weights));
    choice.log_line += contract_log(contract, 0);
    std::shared_ptr<void> keep(std::move(lm.checkpoint));
    GRIDQ_ASSIGN_OR_RETURN(
        be, make_backend(choice.kind, lm.spec, std::move(w), keep, opts, kernels, pages, &choice.log_line));
  }
  return finish_open(std::move(be), model_dir, opts, std::move(choice));
}

std::unique_ptr<Engine> Engine::finish_open(std::unique_ptr<Backend> be, const std::string& model_dir,
                                            const EngineOptions& opts, DeviceChoice choice) {
  auto e = from_backend(std::move(be), opts);
  e->model_dir_ = model_dir;
  e->device_ = choice.kind;
  e->device_log_ = std::move(choice.log_line);
  // The CUDA engine runs kCudaStepTokens rows a step: a longer chunk reads every weight once per step's
  // prompt tokens instead of once per 512.
  if (opts.prefill_chunk == 0 && choice.kind == DeviceKind::kCuda) e->opts_.prefill_chunk = kCudaStepTokens;
  return e;
}

Expected<std::unique_ptr<Engine>> Engine::open_synthetic(const std::string& tokenizer_dir,
                                                         const EngineOptions& opts, DeviceChoice choice) {
  const CudaBackendHooks* hooks = cuda_backend_hooks();
  if (choice.kind != DeviceKind::kCuda || !hooks || !hooks->synthetic)
    return err(
        "engine: synthetic model '{}' is built on the GPU: it needs --device cuda and a CUDA build "
        "({})",
        opts.synthetic, choice.log_line);
  if (opts.activation_contract == "w4a16")
    return err(
        "engine: synthetic model '{}' is built with the FP4 activation contract; --activation-contract "
        "w4a16 applies to loaded artifacts only",
        opts.synthetic);
  if (opts.synthetic_vocab < 0)
    return err("engine: synthetic_vocab must be >= 0 (got {})", opts.synthetic_vocab);
  GRIDQ_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, hooks->synthetic(opts.synthetic, opts.synthetic_seed,
                                                                       opts.synthetic_vocab, opts.dev));
  choice.log_line += fmt::format("; synthetic {} (random weights, seed {}), tokenizer from {}",
                                 opts.synthetic, opts.synthetic_seed, tokenizer_dir);
  return finish_open(std::move(be), tokenizer_dir, opts, std::move(choice));
}

std::unique_ptr<Engine> Engine::from_backend(std::unique_ptr<Backend> backend, const EngineOptions& opts) {
  std::unique_ptr<Engine> e(new Engine());
  e->backend_ = std::move(backend);
  e->opts_ = opts;
  // The CPU's chunk: 256 tokens prefill a 514-token prompt of the bundled model at 2 threads ~16 % faster
  // than 512 (a chunk's activations are tens of MiB touched fresh, and two threads fault them in one after
  // the other) and as fast at 1 thread; 128-192 are within noise of 256, 64 slower (weights re-read per
  // chunk).
  if (e->opts_.prefill_chunk <= 0) e->opts_.prefill_chunk = 256;
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

Expected<SampledToken> Engine::prefill_sampled(SeqId id, std::span<const int32_t> tokens,
                                               const SamplePlan& plan) {
  if (tokens.empty()) return err("engine: prefill of sequence {} with no tokens", id);
  // All but the last chunk without logits, then the last one sampled.
  const size_t chunk = static_cast<size_t>(opts_.prefill_chunk);
  const size_t head = (tokens.size() - 1) / chunk * chunk;
  if (head > 0) GRIDQ_RETURN_IF_ERROR(prefill(id, tokens.first(head), LogitsMode::kNone).status());
  BatchItem it{id, tokens.subspan(head), LogitsMode::kLast};
  const SamplePlan* plans[1] = {&plan};
  GRIDQ_ASSIGN_OR_RETURN(auto out, forward_sampled(std::span<const BatchItem>(&it, 1), plans));
  return out.at(0);
}

Expected<std::vector<SampledToken>> Engine::decode_sampled(std::span<const SeqId> seqs,
                                                           std::span<const int32_t> tokens,
                                                           std::span<const SamplePlan* const> plans) {
  GRIDQ_ASSIGN_OR_RETURN(auto items, decode_items(seqs, tokens));
  return forward_sampled(items, plans);
}

Expected<std::vector<SampledToken>> Engine::forward_sampled(std::span<const BatchItem> items,
                                                            std::span<const SamplePlan* const> plans) {
  const size_t rows = logits_rows(items);
  if (plans.size() != rows) return err("engine: {} sampling plans for {} logits rows", plans.size(), rows);
  std::vector<SampledToken> out;
  if (backend_->samples_on_device()) {
    GRIDQ_RETURN_IF_ERROR(backend_->forward_sampled(items, plans, out));
    if (out.size() != rows) return err("engine: backend sampled {} of {} rows", out.size(), rows);
    return out;
  }
  std::vector<float> logits;
  GRIDQ_RETURN_IF_ERROR(backend_->forward(items, logits));
  const size_t V = static_cast<size_t>(vocab_size());
  if (logits.size() != rows * V)
    return err("engine: backend returned {} logits for {} rows", logits.size(), rows);
  return sample_rows(logits, V, plans);
}

Expected<std::vector<BatchItem>> Engine::decode_items(std::span<const SeqId> seqs,
                                                      std::span<const int32_t> tokens) {
  if (seqs.size() != tokens.size())
    return err("engine: decode got {} sequences and {} tokens", seqs.size(), tokens.size());
  std::vector<BatchItem> items;
  items.reserve(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    items.push_back(BatchItem{seqs[i], tokens.subspan(i, 1), LogitsMode::kLast});
  return items;
}

Expected<std::vector<float>> Engine::decode(std::span<const SeqId> seqs, std::span<const int32_t> tokens) {
  GRIDQ_ASSIGN_OR_RETURN(auto items, decode_items(seqs, tokens));
  return forward(items);
}

Expected<std::vector<float>> Engine::forward(std::span<const BatchItem> items) {
  std::vector<float> out;
  GRIDQ_RETURN_IF_ERROR(backend_->forward(items, out));
  return out;
}

}  // namespace gridq::runtime

// The backend-agnostic engine the CLI and the server use: open a model, create sequences, prefill them
// (chunked), run decode steps for a set of sequences, free them. Logits are fp32 [rows, vocab].
//
//   auto eng = Engine::open("models/laguna-tiny-code", {});
//   SeqId s = eng->create_sequence();
//   auto last = eng->prefill(s, prompt_ids);            // [vocab] logits of the last prompt token
//   auto step = eng->decode({s}, {next_id});              // [1, vocab]
//   eng->free_sequence(s);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/loader.h"
#include "runtime/backend.h"
#include "runtime/device.h"

namespace gridq::runtime {

struct EngineOptions {
  int threads = 0;              // CPU threads (0 = OpenMP default)
  int prefill_chunk = 0;        // tokens per prefill forward; 0: by device (cpu 256, cuda kCudaStepTokens)
  std::string device = "auto";  // cpu, cuda or auto (choose_device in device.h)
  DeviceOptions dev;            // what the CUDA backend is asked for; unused on cpu
  // The activation contract of the FP4-CB layers (issue 15 item 4): "" = the artifact's own (format.md §14.1:
  // act_bits 4, FP4 group-16 QDQ of their inputs), "w4a4" the same said explicitly, "w4a16" their inputs
  // unquantized (BF16). Other layers (FP8 W8A8, FP8-CB, BF16) keep their contracts. Named in device_log().
  std::string activation_contract;
  // The CPU backend's dot products (cpu/bf16_dot.h): "reference" (the one summation order, the oracle),
  // "bf16" (AVX512-BF16 with activations rounded to BF16: faster, not bit-identical to the reference;
  // refused on a CPU without it), "auto" (bf16 where the CPU has it, else reference). Named in device_log().
  std::string cpu_kernels = "reference";
  // Where the CPU backend's matrices live (cpu/weight_pages.h): "auto" (copied onto transparent huge pages
  // where the kernel grants them, else read from the mmap), "huge-pages" (refused without THP), "mmap". The
  // bits are the same; named in device_log().
  std::string cpu_weights = "auto";
  // A full-size synthetic model (cuda/synthetic_model.h names) built on the GPU instead of loading one; the
  // model_dir given to open() then only supplies the tokenizer side (tokenizer, template, generation config).
  std::string synthetic;
  uint64_t synthetic_seed = 1;
  int synthetic_vocab = 0;  // > 0: the vocabulary size (the tokenizer's), else the config's
};

class Engine {
 public:
  // Opens an HF checkpoint directory (BF16) or a gridbook artifact on the device opts.device picks: the CPU
  // backend, or the registered CUDA backend (device.h). The device is chosen before anything is loaded, so
  // `--device cuda` without a usable GPU fails at once.
  // With opts.synthetic set, the weights are random and built on the GPU (`gridq serve --synthetic`): CUDA
  // only, refused on any other device.
  static Expected<std::unique_ptr<Engine>> open(const std::string& model_dir, const EngineOptions& opts);
  // Wraps an existing backend (tests with synthetic models; other backends); device_log() says so.
  static std::unique_ptr<Engine> from_backend(std::unique_ptr<Backend> backend, const EngineOptions& opts);

  const model::ModelSpec& spec() const { return backend_->spec(); }
  const std::string& model_dir() const { return model_dir_; }
  int vocab_size() const { return spec().vocab_size; }
  // The device that runs the model and one line naming it and why (the CLI prints it once at open).
  DeviceKind device() const { return device_; }
  const std::string& device_log() const { return device_log_; }

  SeqId create_sequence();
  void free_sequence(SeqId id);
  int64_t sequence_length(SeqId id) const { return backend_->sequence_length(id); }

  // Appends `tokens` in chunks of prefill_chunk. Returns the logits of the last token [vocab] (kLast), of
  // every token [n, vocab] (kAll), or nothing (kNone).
  Expected<std::vector<float>> prefill(SeqId id, std::span<const int32_t> tokens,
                                       LogitsMode mode = LogitsMode::kLast);
  // One token per sequence, all in one forward: returns [seqs.size(), vocab].
  Expected<std::vector<float>> decode(std::span<const SeqId> seqs, std::span<const int32_t> tokens);
  // Raw batched forward (several sequences, any token counts, one forward; no chunking).
  Expected<std::vector<float>> forward(std::span<const BatchItem> items);

  // The same three, sampling each logits row r with plans[r] (Sampler::plan; null: not sampled, token -1)
  // where the logits are: on the device when the backend samples there (copying back tokens, not logits),
  // else on the host. Either way the algorithm of runtime/sampler.h.
  Expected<SampledToken> prefill_sampled(SeqId id, std::span<const int32_t> tokens, const SamplePlan& plan);
  Expected<std::vector<SampledToken>> decode_sampled(std::span<const SeqId> seqs,
                                                     std::span<const int32_t> tokens,
                                                     std::span<const SamplePlan* const> plans);
  Expected<std::vector<SampledToken>> forward_sampled(std::span<const BatchItem> items,
                                                      std::span<const SamplePlan* const> plans);

  Backend& backend() { return *backend_; }

 private:
  Engine() = default;
  static std::unique_ptr<Engine> finish_open(std::unique_ptr<Backend> be, const std::string& model_dir,
                                             const EngineOptions& opts, DeviceChoice choice);
  static Expected<std::unique_ptr<Engine>> open_synthetic(const std::string& tokenizer_dir,
                                                          const EngineOptions& opts, DeviceChoice choice);
  // One kLast item per sequence, token i for seqs[i].
  static Expected<std::vector<BatchItem>> decode_items(std::span<const SeqId> seqs,
                                                       std::span<const int32_t> tokens);
  std::unique_ptr<Backend> backend_;
  EngineOptions opts_;
  std::string model_dir_;
  DeviceKind device_ = DeviceKind::kCpu;
  std::string device_log_ = "device: custom backend";
  SeqId next_id_ = 1;
};

}  // namespace gridq::runtime

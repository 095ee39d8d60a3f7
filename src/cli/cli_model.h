// Shared by the run commands (generate, chat, logits, eval): engine + tokenizer opening and the
// sampling options, so every command spells them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/sampling_limits.h"
#include "text/tokenizer.h"

namespace gridq::cli {

struct RunOptions {
  int threads = 0;
  int prefill_chunk = 0;                // 0: by device (EngineOptions::prefill_chunk)
  std::string device = "auto";          // --device cpu|cuda|auto
  double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization (cuda only)
  int max_num_seqs = 16;                // sequences that hold KV at once (serve sets it; eval raises it)
  int64_t max_num_batched_tokens = 0;   // serve: the cuda step's token budget (runtime::DeviceOptions)
  bool enforce_eager = false;           // --enforce-eager: no CUDA graphs (vLLM's name)
  int64_t max_model_len = 0;            // 0 = the model's (serve sets it)
  int64_t num_gpu_blocks_override = 0;  // KV pages (serve's --num-gpu-blocks-override; 0 = default)
  bool cpu_kv_budget = false;           // serve: the cpu KV is a fixed pool too (runtime::DeviceOptions)
  bool prefix_caching = false;          // serve: prefix caching will be on (runtime::DeviceOptions)
  std::string synthetic;                // serve --synthetic NAME: random full-size weights on the GPU
  uint64_t synthetic_seed = 1;
  int synthetic_vocab = 0;  // the tokenizer's vocabulary size for a synthetic model
  // --activation-contract w4a4|w4a16 ("" = the artifact's own; runtime::EngineOptions::activation_contract)
  std::string activation_contract;
  // --cpu-kernels auto|reference|bf16 (runtime::EngineOptions::cpu_kernels). The serving commands default to
  // auto; logits and eval, which measure, to reference.
  std::string cpu_kernels = "auto";
  // --cpu-weights auto|huge-pages|mmap (runtime::EngineOptions::cpu_weights).
  std::string cpu_weights = "auto";
};

void add_run_options(CLI::App& sub, RunOptions& o);
// --cpu-kernels, as every run command and serve declare it (the default shown is v's value).
void add_cpu_kernels_option(CLI::App& sub, std::string& v);
// --cpu-weights, as every run command and serve declare it.
void add_cpu_weights_option(CLI::App& sub, std::string& v);
// --activation-contract, as every run command and serve declare it.
extern const char* const kActivationContractHelp;
// --device and --gpu-memory-utilization as serve and bench declare them too, so every command spells and
// checks them the same way: --device is one of cpu, cuda, auto; the fraction is in (0, 1].
extern const char* const kDeviceHelp;
CLI::Validator device_check();
CLI::Validator memory_fraction_check();
// Start-up refuses nonsense values (issue 14 item 5): a finite number in [lo, hi] (NaN and inf refused), a
// non-empty string, and the thread counts a machine can have.
CLI::Validator finite_check(double lo, double hi);
CLI::Validator non_empty_check();
// A sampling value in the server's range for it (runtime/sampling_limits.h), the rule named on refusal.
CLI::Validator sampling_check(const runtime::SamplingRange& r);
inline constexpr int kMaxThreads = 4096;

struct SamplingCli {
  int max_tokens = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
};

void add_sampling_options(CLI::App& sub, SamplingCli& s);
runtime::SamplingParams to_params(const SamplingCli& s);

// Opens the engine on the device --device picks and reports the engine's device line once through `log`
// (default: "gridq: device: ..." on stderr).
using LogFn = std::function<void(const std::string&)>;
Expected<std::unique_ptr<runtime::Engine>> open_engine(const std::string& model_dir, const RunOptions& o,
                                                       const LogFn& log = {});
Expected<text::Tokenizer> open_tokenizer(const std::string& model_dir);

// Warns on stderr when prompt + max_tokens runs past the context (--max-model-len, else the model's
// max_position_embeddings): the positions past it are outside what the model was trained for.
void warn_past_context(const runtime::Engine& eng, const RunOptions& o, size_t prompt_tokens, int max_tokens);

// EOS ids of the model: config.json's eos_token_id plus generation_config.json's, deduplicated.
std::vector<int32_t> eos_ids(const runtime::Engine& eng);

}  // namespace gridq::cli

#include "cli/cli_model.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "io/checkpoint.h"
#include "runtime/sampling_limits.h"

namespace gridq::cli {

const char* const kDeviceHelp =
    "where the model runs: cpu (the reference engine), cuda (the GPU; an error when this gridq has no CUDA "
    "backend or no usable GPU), auto (cuda when usable, else cpu, saying why; default)";

CLI::Validator device_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v == "cpu" || v == "cuda" || v == "auto") return {};
        return "expected cpu, cuda or auto (got '" + v + "')";
      },
      "cpu|cuda|auto");
}

CLI::Validator memory_fraction_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          if (used == v.size() && x > 0.0 && x <= 1.0) return {};
        } catch (const std::exception&) {
        }
        return "must be a number in (0, 1] (got '" + v + "')";
      },
      "(0,1]");
}

CLI::Validator finite_check(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          // NaN fails both comparisons, so it is refused here, unlike with CLI::Range.
          if (used == v.size() && x >= lo && x <= hi) return {};
        } catch (const std::exception&) {
        }
        return fmt::format("must be a number in [{}, {}] (got '{}')", lo, hi, v);
      },
      fmt::format("[{},{}]", lo, hi));
}

CLI::Validator sampling_check(const runtime::SamplingRange& r) {
  return CLI::Validator(
      [r](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(v, &used);
          // NaN fails every comparison and is refused; fp32 must keep an open lower bound open.
          const bool lo_ok =
              r.lo_open ? x > r.lo && static_cast<float>(x) > static_cast<float>(r.lo) : x >= r.lo;
          if (used == v.size() && lo_ok && x <= r.hi) return {};
        } catch (const std::exception&) {
        }
        return fmt::format("{} must be a number in {}{}, {}] (got '{}')", r.name, r.lo_open ? "(" : "[", r.lo,
                           r.hi, v);
      },
      fmt::format("{}{},{}]", r.lo_open ? "(" : "[", r.lo, r.hi));
}

CLI::Validator non_empty_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string { return v.empty() ? "must not be empty" : std::string(); }, "TEXT");
}

void add_run_options(CLI::App& sub, RunOptions& o) {
  sub.add_option("--threads", o.threads, "CPU threads (0 = all cores)")->check(CLI::Range(0, kMaxThreads));
  sub.add_option("--prefill-chunk", o.prefill_chunk,
                 "tokens per prefill forward (default 0: 256 on cpu, 2048 on cuda)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--device", o.device, kDeviceHelp)->check(device_check());
  sub.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                 "fraction of the GPU's memory gridq may hold, in (0, 1] (default 0.9; cuda only)")
      ->check(memory_fraction_check());
  sub.add_flag("--enforce-eager", o.enforce_eager,
               "cuda: launch every kernel, no CUDA graph replay (debugging)");
  sub.add_option("--activation-contract", o.activation_contract, kActivationContractHelp)
      ->check(CLI::IsMember({"w4a4", "w4a16"}));
  add_cpu_kernels_option(sub, o.cpu_kernels);
  add_cpu_weights_option(sub, o.cpu_weights);
}

void add_cpu_weights_option(CLI::App& sub, std::string& v) {
  sub.add_option(
         "--cpu-weights", v,
         "where the cpu backend's weights live: huge-pages (copied once at start onto 2 MiB transparent "
         "huge pages: fewer TLB misses, faster decode; refused where the kernel has THP off), mmap (read "
         "in place from the files), auto (huge-pages where THP is on); the same results either way")
      ->check(CLI::IsMember({"auto", "huge-pages", "mmap"}))
      ->capture_default_str();
}

void add_cpu_kernels_option(CLI::App& sub, std::string& v) {
  sub.add_option("--cpu-kernels", v,
                 "cpu dot products: reference (fp32 activations, the one summation order: the oracle), bf16 "
                 "(AVX512-BF16, activations rounded to BF16: faster, not bit-identical to reference; refused "
                 "without AVX512-BF16), auto (bf16 where the CPU has it)")
      ->check(CLI::IsMember({"auto", "reference", "bf16"}))
      ->capture_default_str();
}

const char* const kActivationContractHelp =
    "inputs of the NVFP4-CB layers: w4a4 = FP4 group-16 QDQ (the artifact's contract), w4a16 = unquantized "
    "BF16 (default: the artifact's own; e.g. --activation-contract w4a16)";

void add_sampling_options(CLI::App& sub, SamplingCli& s) {
  sub.add_option("--max-tokens", s.max_tokens, "tokens to generate at most")
      ->check(CLI::Range(0, INT32_MAX))
      ->capture_default_str();
  // The server's ranges (runtime/sampling_limits.h): a value a request would get a 400 for is refused here.
  auto num = [&sub](const char* flag, float& v, const runtime::SamplingRange& r, const char* help) {
    sub.add_option(flag, v, help)->check(sampling_check(r))->capture_default_str();
  };
  num("--temperature", s.temperature, runtime::kTemperatureRange, "sampling temperature (0 = greedy)");
  sub.add_option("--top-k", s.top_k, "keep the k most likely tokens (0 or -1 = off)")
      ->check(CLI::Range(static_cast<int>(runtime::kTopKMin), INT32_MAX))
      ->capture_default_str();
  num("--top-p", s.top_p, runtime::kTopPRange, "nucleus sampling mass (1 = off)");
  num("--min-p", s.min_p, runtime::kMinPRange, "drop tokens below min_p x the top probability (0 = off)");
  num("--repetition-penalty", s.repetition_penalty, runtime::kRepetitionPenaltyRange,
      "HF-style repetition penalty (1 = off)");
  num("--presence-penalty", s.presence_penalty, runtime::kPresencePenaltyRange,
      "OpenAI-style presence penalty");
  num("--frequency-penalty", s.frequency_penalty, runtime::kFrequencyPenaltyRange,
      "OpenAI-style frequency penalty");
  sub.add_option("--seed", s.seed, "RNG seed (same seed -> same tokens)");
  sub.add_option("--stop", s.stop, "stop string (repeatable)");
}

void warn_past_context(const runtime::Engine& eng, const RunOptions& o, size_t prompt_tokens,
                       int max_tokens) {
  const int64_t ctx = o.max_model_len > 0 ? o.max_model_len : eng.spec().max_position_embeddings;
  if (ctx <= 0 || static_cast<int64_t>(prompt_tokens) + max_tokens <= ctx) return;
  std::fprintf(
      stderr,
      "gridq: warning: the prompt's %zu tokens + --max-tokens %d run past the context of %lld tokens "
      "(positions the model was not made for)\n",
      prompt_tokens, max_tokens, static_cast<long long>(ctx));
}

runtime::SamplingParams to_params(const SamplingCli& s) {
  runtime::SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.seed = s.seed;
  p.stop_strings = s.stop;
  return p;
}

Expected<std::unique_ptr<runtime::Engine>> open_engine(const std::string& model_dir, const RunOptions& o,
                                                       const LogFn& log) {
  runtime::EngineOptions eo;
  eo.threads = o.threads;
  eo.prefill_chunk = o.prefill_chunk;
  eo.device = o.device;
  eo.dev.gpu_memory_utilization = o.gpu_memory_utilization;
  eo.dev.max_num_seqs = o.max_num_seqs;
  eo.dev.max_model_len = o.max_model_len;
  eo.dev.cuda_graphs = !o.enforce_eager;
  eo.dev.num_gpu_blocks_override = o.num_gpu_blocks_override;
  eo.dev.cpu_kv_budget = o.cpu_kv_budget;
  eo.dev.prefix_caching = o.prefix_caching;
  eo.dev.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.synthetic = o.synthetic;
  eo.synthetic_seed = o.synthetic_seed;
  eo.synthetic_vocab = o.synthetic_vocab;
  eo.activation_contract = o.activation_contract;
  eo.cpu_kernels = o.cpu_kernels;
  eo.cpu_weights = o.cpu_weights;
  GRIDQ_ASSIGN_OR_RETURN(auto eng, runtime::Engine::open(model_dir, eo));
  if (log) {
    log(eng->device_log());
  } else {
    std::fprintf(stderr, "gridq: %s\n", eng->device_log().c_str());
    std::fflush(stderr);
  }
  return eng;
}

Expected<text::Tokenizer> open_tokenizer(const std::string& model_dir) {
  return text::Tokenizer::from_file((std::filesystem::path(model_dir) / "tokenizer.json").string());
}

std::vector<int32_t> eos_ids(const runtime::Engine& eng) {
  std::vector<int32_t> ids(eng.spec().eos_token_ids.begin(), eng.spec().eos_token_ids.end());
  const auto gc = std::filesystem::path(eng.model_dir()) / "generation_config.json";
  if (std::filesystem::exists(gc)) {
    auto j = io::read_json_file(gc.string());
    if (j.ok() && j->contains("eos_token_id")) {
      const auto& e = (*j)["eos_token_id"];
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
      if (e.is_array())
        for (const auto& v : e)
          if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace gridq::cli

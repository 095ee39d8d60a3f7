// Shared by the run commands (generate, chat, logits, eval): engine + tokenizer opening and the
// sampling options, so every command spells them the same way.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace gridq::cli {

struct RunOptions {
  int threads = 0;
  int prefill_chunk = 512;
};

void add_run_options(CLI::App& sub, RunOptions& o);

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

Expected<std::unique_ptr<runtime::Engine>> open_engine(const std::string& model_dir, const RunOptions& o);
Expected<text::Tokenizer> open_tokenizer(const std::string& model_dir);

// EOS ids of the model: config.json's eos_token_id plus generation_config.json's, deduplicated.
std::vector<int32_t> eos_ids(const runtime::Engine& eng);

}  // namespace gridq::cli

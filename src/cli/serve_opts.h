// `gridq serve`'s options (cmd_serve_flags.cpp registers them, vLLM's names where the meaning is the same)
// and the command (cmd_serve.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gridq::cli {

struct ServeOpts {
  std::string dir;
  std::string synthetic;  // --synthetic NAME: dir then only supplies the tokenizer side
  uint64_t synthetic_seed = 1;
  std::string host = "127.0.0.1";
  int port = 8000;
  int64_t max_model_len = 0;
  int max_num_seqs = 32;
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  std::string device = "auto";
  std::string kv_cache_dtype = "auto";
  std::string activation_contract;   // "" = the artifact's own
  std::string cpu_kernels = "auto";  // --cpu-kernels (RunOptions::cpu_kernels)
  std::string cpu_weights = "auto";  // --cpu-weights (RunOptions::cpu_weights)
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string allowed_origins = "[\"*\"]";
  std::vector<std::string> served_names;
  std::string default_kwargs;
  std::string tool_parser;
  std::string reasoning_parser;
  std::string chat_template;
  int threads = 0;
  size_t max_body_bytes = 2u << 20;
  size_t max_queue = 256;
  double queue_timeout = 0.0;
  double shutdown_timeout = 30.0;
  bool metrics_public = false, skip_pin_check = false;
  std::string access_log;
  int64_t max_batch_tokens = 0;  // 0: by device (cuda 4096: one prefill step of the engine; cpu 256)
  int64_t num_gpu_blocks_override = 0;
  bool prefix_caching = true, prefix_caching_explicit = false;  // explicit: a backend without it is an error
  bool prompt_tokens_details = false;
};

// Starts the server and blocks until it is told to stop; the process exit code.
int run_serve(ServeOpts o);

}  // namespace gridq::cli

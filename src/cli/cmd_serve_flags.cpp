// `gridq serve`'s command line: options and help (cli/serve_opts.h), handed to run_serve (cmd_serve.cpp).
#include <memory>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "cli/serve_opts.h"

namespace gridq::cli {
namespace {

Registrar reg(
    {"serve",
     "OpenAI-compatible HTTP server (chat, completions, tools, reasoning, metrics)\n"
     "Examples:\n"
     "  gridq serve models/laguna-tiny-code --port 8000\n"
     "  gridq serve ART --device cuda --max-num-seqs 64 --api-key-file keys.txt --served-model-name laguna\n"
     "  gridq serve TOKENIZER_DIR --synthetic laguna-s-2.1 --device cuda   # load tests without a "
     "checkpoint\n",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<ServeOpts>();
       sub.add_option("ARTIFACT", o->dir,
                      "gridbook artifact or BF16 checkpoint directory (with --synthetic: a directory with "
                      "tokenizer.json and a chat template)")
           ->required();
       sub.add_option("--synthetic", o->synthetic,
                      "serve a full-size model of random weights built on the GPU instead (benchmarks: "
                      "laguna-s-2.1, laguna-xs-2.1, laguna-tiny-code); its vocabulary is the tokenizer's")
           ->check(non_empty_check());
       sub.add_option("--synthetic-seed", o->synthetic_seed, "seed of the synthetic weights (default 1)");
       sub.add_option("--host", o->host, "address to bind (default 127.0.0.1)")->check(non_empty_check());
       sub.add_option("--port", o->port, "TCP port (0 = any free port)")->check(CLI::Range(0, 65535));
       sub.add_option("--max-model-len", o->max_model_len, "context length (default: the model's)")
           ->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
       sub.add_option("--max-num-seqs", o->max_num_seqs, "sequences per step (default 32)")
           ->check(CLI::Range(1, 1 << 16));
       sub.add_option("--device", o->device, kDeviceHelp)->check(device_check());
       sub.add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                      "fraction of the GPU's memory gridq may hold, in (0, 1] (default 0.9; unused on cpu)")
           ->check(memory_fraction_check());
       sub.add_flag("--enforce-eager", o->enforce_eager, "cuda: no CUDA graph replay of decode steps");
       sub.add_option("--kv-cache-dtype", o->kv_cache_dtype, "auto (default), bf16, fp32");
       sub.add_option("--activation-contract", o->activation_contract, kActivationContractHelp)
           ->check(CLI::IsMember({"w4a4", "w4a16"}));
       add_cpu_kernels_option(sub, o->cpu_kernels);
       add_cpu_weights_option(sub, o->cpu_weights);
       sub.add_option("--api-key", o->api_keys, "required API key (repeatable)")->check(non_empty_check());
       sub.add_option(
           "--api-key-file", o->api_key_file,
           "file with one API key per line (trimmed; blank and # lines skipped; at least one key)");
       sub.add_option("--allowed-origins", o->allowed_origins,
                      "CORS: JSON list of origins browsers may call from (default [\"*\"]; [] = none)");
       sub.add_option("--served-model-name", o->served_names, "model id(s) to answer to")
           ->check(non_empty_check());
       sub.add_option("--default-chat-template-kwargs", o->default_kwargs,
                      "JSON object of template variables");
       sub.add_option("--tool-call-parser", o->tool_parser, "poolside_v1 (Laguna default), hermes, none");
       sub.add_option("--reasoning-parser", o->reasoning_parser, "poolside_v1 (default), none");
       sub.add_option("--chat-template", o->chat_template, "chat template file (default: the model's)");
       sub.add_option("--threads", o->threads, "CPU threads (0 = all)")->check(CLI::Range(0, kMaxThreads));
       sub.add_option("--max-body-bytes", o->max_body_bytes, "request body limit (default 2 MiB)")
           ->check(CLI::Range(size_t{1}, size_t{1} << 32));
       sub.add_option("--max-queue", o->max_queue, "waiting requests before 429 (default 256)")
           ->check(CLI::Range(size_t{0}, size_t{1} << 20));
       sub.add_option("--queue-timeout", o->queue_timeout, "seconds a request may wait (0 = forever)")
           ->check(finite_check(0.0, 1e7));
       sub.add_option("--shutdown-timeout", o->shutdown_timeout, "drain seconds on SIGTERM (default 30)")
           ->check(finite_check(0.0, 1e7));
       sub.add_option("--max-num-batched-tokens", o->max_batch_tokens,
                      "token budget per step (default: 4096 on cuda, 256 on cpu); on cuda also the rows the "
                      "step buffers hold (64 up to 8192)")
           ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
       sub.add_option("--num-gpu-blocks-override", o->num_gpu_blocks_override,
                      "KV pages of 16 tokens (cuda: at most this many; cpu: exactly; default: from memory, "
                      "cpu max_num_seqs x max_model_len)")
           ->check(CLI::Range(int64_t{0}, int64_t{1} << 32));
       auto* pc = sub.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o->prefix_caching,
                               "share KV pages of common prompt prefixes (default on)");
       sub.add_flag(
           "--enable-prompt-tokens-details", o->prompt_tokens_details,
           "report usage.prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache spared");
       sub.add_flag("--metrics-public", o->metrics_public, "serve /metrics without an API key");
       sub.add_option("--access-log", o->access_log, "one JSON line per request to FILE ('-': stderr)");
       sub.add_flag("--skip-pin-check", o->skip_pin_check, "do not verify PINS.json (logged loudly)");
       return [o, pc] { return o->prefix_caching_explicit = pc->count() > 0, run_serve(*o); };
     }});

}  // namespace
}  // namespace gridq::cli

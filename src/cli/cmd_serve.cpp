// gridq serve ARTIFACT: the OpenAI-compatible HTTP server (docs/api.md). Flags mirror vLLM's. Order of start:
// check the flags, listen (/health says 503 loading; a busy port fails in milliseconds, not after minutes of
// hashing), verify PINS.json (before anything of the artifact is parsed), load tokenizer, template and
// engine, log the kernel path per weight format, then serve until SIGINT/SIGTERM and drain.
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <optional>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "cli/serve_opts.h"
#include "core/file_read.h"
#include "gridbook/quant_config.h"
#include "io/checkpoint.h"
#include "io/pins.h"
#include "io/sha256.h"
#include "runtime/device.h"
#include "serve/api_keys.h"
#include "serve/api_server.h"
#include "serve/http_server.h"
#include "serve/kv_setup.h"
#include "serve/runtime_engine.h"
#include "serve/scheduler.h"
#include "text/jinja/template.h"

namespace gridq::cli {
namespace {

namespace fs = std::filesystem;
using serve::ojson;

void log(const std::string& s) {
  std::fprintf(stderr, "gridq serve: %s\n", s.c_str());
  std::fflush(stderr);
}

Expected<std::string> read_text(const fs::path& p) { return read_file_bytes(p.string()); }

// The chat template: --chat-template FILE, else chat_template.jinja, else tokenizer_config.json's
// chat_template.
Expected<std::string> load_template(const ServeOpts& o) {
  if (!o.chat_template.empty()) return read_text(o.chat_template);
  fs::path dir(o.dir);
  if (fs::exists(dir / "chat_template.jinja")) return read_text(dir / "chat_template.jinja");
  GRIDQ_ASSIGN_OR_RETURN(std::string cfg, read_text(dir / "tokenizer_config.json"));
  auto j = nlohmann::json::parse(cfg, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return err("{}/tokenizer_config.json: not a JSON object", o.dir);
  auto it = j.find("chat_template");
  if (it == j.end() || !it->is_string())
    return err(
        "{}: no chat template (chat_template.jinja, tokenizer_config.json chat_template, --chat-template)",
        o.dir);
  return it->get<std::string>();
}

// Whether `dir` is a gridbook artifact: its config.json carries a gridbook quantization_config. Read only
// when there is no PINS.json to verify first; a quantization_config gridq cannot read is an error here.
Expected<bool> is_gridbook_artifact(const std::string& dir) {
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json cfg, io::read_json_file((fs::path(dir) / "config.json").string()));
  GRIDQ_ASSIGN_OR_RETURN(auto stub, gridbook::parse_quantization_stub(cfg));
  return stub.has_value();
}

// Issue #6 item 5: a gridbook artifact is served only against its PINS.json; a plain
// Hugging Face checkpoint without one is served with a warning. Returns an error message to refuse with.
std::optional<std::string> check_pins(const ServeOpts& o) {
  const fs::path pins = fs::path(o.dir) / io::kPinsFile;
  if (!o.synthetic.empty()) {
    log(fmt::format(
        "synthetic {}: random weights built on the GPU, nothing to verify; tokenizer and template "
        "from {}",
        o.synthetic, o.dir));
    return std::nullopt;
  }
  if (o.skip_pin_check) {
    log(fmt::format("WARNING: --skip-pin-check given: the files of {} are NOT verified against {}", o.dir,
                    io::kPinsFile));
    return std::nullopt;
  }
  if (fs::exists(pins)) {
    Status st = io::verify_pins(o.dir);
    if (!st.ok()) return "refusing to start: " + st.message();
    log(fmt::format("verified {} against {}", o.dir, pins.string()));
    return std::nullopt;
  }
  auto artifact = is_gridbook_artifact(o.dir);
  if (!artifact.ok())
    return fmt::format("refusing to start: {} has no {} and its config.json cannot be checked: {}", o.dir,
                       io::kPinsFile, artifact.message());
  if (*artifact)
    return fmt::format(
        "refusing to start: {} is a gridbook artifact (config.json has a gridbook quantization_config) "
        "but has no {}; an artifact is served only against its pins. Run `gridq pin {}` (or pass "
        "--skip-pin-check to serve it unverified)",
        o.dir, io::kPinsFile, o.dir);
  log(fmt::format("WARNING: {} has no {}; files are not verified (run `gridq pin {}`)", o.dir, io::kPinsFile,
                  o.dir));
  return std::nullopt;
}

struct SignalState {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
};

}  // namespace

int run_serve(ServeOpts o) {
  while (o.dir.size() > 1 && o.dir.back() == '/') o.dir.pop_back();
  if (!fs::is_directory(o.dir)) return fail(o.dir + ": not a directory");
  // Ranges are checked by the flags' validators at parse time (issue 14 item 5); what is left needs a file.
  // Before listening: `--device cuda` on a machine that cannot run it is refused at once, not after /health
  // has said "loading". The engine chooses again at open (the probe is cheap) and logs the choice.
  auto pick = runtime::choose_device(o.device);
  if (!pick.ok()) return fail(pick.message());
  if (!o.synthetic.empty() && pick->kind != runtime::DeviceKind::kCuda)
    return fail(fmt::format("--synthetic {}: the synthetic models are built on the GPU; {}", o.synthetic,
                            pick->log_line));
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != "bf16" && o.kv_cache_dtype != "fp32")
    return fail(fmt::format("--kv-cache-dtype {}: the cpu backend supports auto, bf16 or fp32 only",
                            o.kv_cache_dtype));
  if (!o.api_key_file.empty()) {
    auto t = read_text(o.api_key_file);
    if (!t.ok()) return fail("--api-key-file: " + t.message());
    auto keys = serve::parse_api_key_file(*t, o.api_key_file);
    if (!keys.ok()) return fail(keys.message());
    o.api_keys.insert(o.api_keys.end(), keys->begin(), keys->end());
  }
  std::vector<std::string> origins;
  {
    auto j = ojson::parse(o.allowed_origins, nullptr, false);
    if (j.is_discarded() || !j.is_array())
      return fail("--allowed-origins must be a JSON list of origins, e.g. '[\"https://app.example\"]'");
    for (const auto& v : j) {
      if (!v.is_string() || v.get_ref<const std::string&>().empty())
        return fail("--allowed-origins must be a JSON list of non-empty strings");
      origins.push_back(v.get<std::string>());
    }
  }
  ojson default_kwargs = ojson::object();
  if (!o.default_kwargs.empty()) {
    default_kwargs = ojson::parse(o.default_kwargs, nullptr, false);
    if (default_kwargs.is_discarded() || !default_kwargs.is_object())
      return fail("--default-chat-template-kwargs must be a JSON object");
  }

  std::vector<std::string> names = o.served_names;
  if (names.empty()) names.push_back(o.synthetic.empty() ? fs::path(o.dir).filename().string() : o.synthetic);

  // 1. Listen while loading: a busy port is reported at once, before minutes of hashing pins.
  serve::Metrics metrics(names[0]);
  serve::HttpOptions ho;
  ho.host = o.host;
  ho.port = static_cast<uint16_t>(o.port);
  ho.api_keys = o.api_keys;
  ho.allowed_origins = origins;
  ho.max_body_bytes = o.max_body_bytes;
  ho.access_log = o.access_log;
  serve::HttpServer http(ho, &metrics);
  serve::ApiServer api(http, metrics);
  api.register_routes();
  if (o.metrics_public) http.make_public("/metrics");
  SignalState sig;
  http.on_signal([&](int signo) {
    int n;
    {
      std::lock_guard lk(sig.mu);
      n = ++sig.count;
    }
    if (api.state() == serve::ApiServer::State::kLoading) {
      log(fmt::format("signal {} while loading: exiting", signo));
      std::_Exit(0);
    }
    if (n >= 2) {
      log("second signal: exiting now");
      std::_Exit(1);
    }
    log(fmt::format("signal {}: draining (up to {} s)", signo, o.shutdown_timeout));
    http.set_draining();
    api.set_state(serve::ApiServer::State::kDraining);
    sig.cv.notify_all();
  });
  auto port = http.start();
  if (!port.ok()) return fail(port.message());
  log(fmt::format("listening on http://{}:{} (loading {})", o.host, *port, o.dir));
  if (o.api_keys.empty()) log("WARNING: no --api-key: every route is open");

  // 2. Pins, before any file of the artifact is parsed.
  if (auto refusal = check_pins(o)) return fail(*refusal);
  std::string artifact_sha = "unpinned";
  if (const fs::path pins = fs::path(o.dir) / io::kPinsFile; fs::exists(pins)) {
    if (auto h = io::sha256_file(pins.string()); h.ok()) artifact_sha = *h;
  }

  // 3. Load.
  RunOptions ro;
  ro.threads = o.threads;
  ro.device = o.device;
  ro.gpu_memory_utilization = o.gpu_memory_utilization;
  ro.max_num_seqs = o.max_num_seqs;
  ro.max_model_len = o.max_model_len;
  ro.enforce_eager = o.enforce_eager;
  ro.num_gpu_blocks_override = o.num_gpu_blocks_override;
  ro.prefix_caching = o.prefix_caching;
  ro.max_num_batched_tokens = o.max_batch_tokens;
  ro.activation_contract = o.activation_contract;
  ro.cpu_kernels = o.cpu_kernels;
  ro.cpu_weights = o.cpu_weights;
  ro.cpu_kv_budget = true;  // the cpu pool is fixed too, so admission and preemption work the same way
  auto tok = open_tokenizer(o.dir);
  if (!tok.ok()) return fail(tok.message());
  ro.synthetic = o.synthetic;
  ro.synthetic_seed = o.synthetic_seed;
  // The synthetic model takes the tokenizer's vocabulary, so every id it samples decodes.
  if (!o.synthetic.empty()) ro.synthetic_vocab = static_cast<int>(tok->vocab_size());
  auto tmpl_text = load_template(o);
  if (!tmpl_text.ok()) return fail(tmpl_text.message());
  text::jinja::TemplateOptions topts;
  topts.name = "chat_template";
  auto tmpl = text::jinja::Template::parse(*tmpl_text, topts);
  if (!tmpl.ok()) return fail(tmpl.message());
  auto eng = open_engine(o.dir, ro, log);
  if (!eng.ok()) return fail(eng.message());
  const runtime::DeviceKind dev_kind = (*eng)->device();
  // The CUDA engine keeps KV in BF16 (docs/gpu.md); the CPU reference keeps FP32.
  if ((*eng)->device() == runtime::DeviceKind::kCuda && o.kv_cache_dtype == "fp32")
    return fail(
        "--kv-cache-dtype fp32: the cuda engine keeps KV in bf16 (use auto or bf16, or --device cpu)");
  if ((*eng)->device() == runtime::DeviceKind::kCpu && o.gpu_memory_utilization != 0.9)
    log("note: --gpu-memory-utilization is accepted for vLLM compatibility; the cpu backend does not use it");
  const auto& spec = (*eng)->spec();
  int64_t max_len = spec.max_position_embeddings > 0 ? spec.max_position_embeddings : 4096;
  if (o.max_model_len > 0) {
    if (o.max_model_len > max_len)
      return fail(fmt::format("--max-model-len {} exceeds the model's max_position_embeddings {}",
                              o.max_model_len, max_len));
    max_len = o.max_model_len;
  }
  std::vector<int32_t> eos = eos_ids(**eng);
  const bool laguna = spec.architecture == "LagunaForCausalLM";
  std::string tool_parser = o.tool_parser.empty() ? (laguna ? "poolside_v1" : "hermes") : o.tool_parser;
  serve::ToolParserKind tkind;
  if (tool_parser == "poolside_v1")
    tkind = serve::ToolParserKind::kPoolside;
  else if (tool_parser == "hermes" || tool_parser == "json" || tool_parser == "qwen3")
    tkind = serve::ToolParserKind::kJson;
  else if (tool_parser == "none")
    tkind = serve::ToolParserKind::kNone;
  else
    return fail("--tool-call-parser " + tool_parser + ": expected poolside_v1, hermes (json) or none");

  serve::ModelBinding mb;
  mb.served_names = names;
  mb.max_model_len = max_len;
  mb.eos_ids = eos;
  mb.markers = {tok->token_id("<think>"), tok->token_id("</think>"), tok->token_id("<assistant>")};
  mb.end_of_turn_id = tok->token_id("</assistant>");
  mb.tool_call_open_id = tok->token_id("<tool_call>");
  mb.tool_call_close_id = tok->token_id("</tool_call>");
  std::string rparser =
      o.reasoning_parser.empty() ? (mb.markers.think_end >= 0 ? "poolside_v1" : "none") : o.reasoning_parser;
  if (rparser != "poolside_v1" && rparser != "none" && rparser != "qwen3" && rparser != "deepseek_r1")
    return fail("--reasoning-parser " + rparser + ": expected poolside_v1 or none");
  mb.reasoning_parser = rparser != "none";
  if (mb.reasoning_parser && (mb.markers.think_start < 0 || mb.markers.think_end < 0))
    return fail("--reasoning-parser " + rparser + ": the tokenizer has no <think>/</think> tokens");
  mb.tool_parser = tkind;
  mb.prompt_tokens_details = o.prompt_tokens_details;
  mb.default_template_kwargs = default_kwargs;
  auto tk = std::make_shared<text::Tokenizer>(std::move(*tok));
  mb.tok = tk.get();
  auto tp = std::make_shared<text::jinja::Template>(std::move(*tmpl));
  const std::string bos = spec.bos_token_id >= 0 ? tk->token_text(spec.bos_token_id) : "";
  const std::string eos_text = eos.empty() ? "" : tk->token_text(eos[0]);
  mb.render = [tp, bos, eos_text](const ojson& messages, const ojson& tools, bool agp,
                                  const ojson& kwargs) -> Expected<std::string> {
    ojson ctx = ojson::object();
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) ctx[it.key()] = it.value();
    ctx["messages"] = messages;
    if (!tools.is_null()) ctx["tools"] = tools;
    ctx["add_generation_prompt"] = agp;
    ctx["bos_token"] = bos;
    ctx["eos_token"] = eos_text;
    return tp->render(ctx);
  };

  auto rengine_or =
      make_serve_engine(std::move(*eng), max_len, o.prefix_caching, o.prefix_caching_explicit, metrics, log);
  if (!rengine_or.ok()) return fail(rengine_or.message());
  auto rengine = std::move(*rengine_or);
  // One line per weight format the backend really runs, naming its kernel path (issue #6 item 5).
  for (const auto& line : rengine->describe_kernels()) log("kernel: " + line);
  log(fmt::format("model {} ({}), max_model_len {}, max_num_seqs {}, tool parser {}, reasoning parser {}",
                  names[0], spec.architecture, max_len, o.max_num_seqs, tool_parser, rparser));
  metrics.set_info(artifact_sha, serve::format_label(rengine->weight_formats()));
  serve::SchedulerOptions so;
  so.max_num_seqs = o.max_num_seqs;
  // The default step budget fills one CUDA forward step (kMaxStepRows: a prefill chunk shares every weight
  // read, so smaller chunks re-read the routed experts); the CPU's, its prefill chunk (runtime/engine.cpp:
  // 256 is its fastest).
  so.max_batch_tokens = o.max_batch_tokens > 0
                            ? o.max_batch_tokens
                            : (dev_kind == runtime::DeviceKind::kCuda ? runtime::kCudaStepTokens : 256);
  log(fmt::format("max_num_batched_tokens {}", so.max_batch_tokens));
  so.max_queue = o.max_queue;
  so.queue_timeout_s = o.queue_timeout;
  serve::Scheduler sched(*rengine, so, &metrics);
  sched.start();
  api.set_ready(mb, &sched);
  log(o.skip_pin_check ? "ready (WARNING: UNVERIFIED files, --skip-pin-check)" : "ready");

  // 4. Serve until a signal, then drain.
  {
    std::unique_lock lk(sig.mu);
    sig.cv.wait(lk, [&] { return sig.count > 0; });
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000));
  if (!sched.wait_idle(deadline)) {
    log("drain timeout: aborting the remaining requests");
    sched.abort_all();
    // The aborts land at the next step boundary. A step can take seconds on a loaded machine; rather than
    // cut those streams off, end them from here (error event and [DONE], api.md §4.8, §9).
    if (!sched.wait_idle(Clock::now() + std::chrono::seconds(1))) api.abort_inflight();
  }
  // stop() writes out what the requests queued (last events, [DONE]) before closing the connections.
  http.stop();
  // Bounded as well (timeout 0 exits within 4 s): if a step still runs, everything the clients get is
  // already written, so exit without waiting for it (and without destroying the engine under it).
  if (!sched.stop_within(Clock::now() + std::chrono::seconds(1))) {
    log("stopped (an engine step was still running)");
    std::_Exit(0);
  }
  log("stopped");
  return 0;
}

}  // namespace gridq::cli

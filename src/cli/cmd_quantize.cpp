// gridq quantize SRC OUT --recipe NAME|FILE --calib FILE: BF16 Hugging Face checkpoint -> gridbook artifact
// (quantizer.md). The work is in quant/pipeline*.cpp (the driver: pipeline_driver.h); this file maps flags to
// QuantizeOptions and prints the outcome (progress goes to stderr, --json prints one summary object on
// stdout).
#include <filesystem>

#include "cli/command.h"
#include "quant/pipeline.h"

namespace gridq::cli {
namespace {

struct QuantizeArgs {
  quant::QuantizeOptions o;
  std::string method;
  bool no_resume = false;
  bool json = false;
  bool quiet = false;
};

int run_quantize(QuantizeArgs& a) {
  a.o.method = a.method;
  a.o.resume = !a.no_resume;
  std::error_code ec;
  a.o.repo_root = std::filesystem::current_path(ec).string();
  if (a.quiet) a.o.progress = Progress::Mode::kQuiet;
  auto s = quant::quantize(a.o);
  if (!s.ok()) return fail(s.message());
  if (a.json) {
    std::printf("%s\n", s->to_json().dump(2).c_str());
  } else if (s->finished) {
    std::printf("wrote %s (%d layers, %lld calibration tokens) in %.1f s, peak host memory %.1f MiB",
                s->out.c_str(), s->layers, static_cast<long long>(s->calib_tokens), s->seconds,
                static_cast<double>(s->peak_rss_bytes) / (1024.0 * 1024.0));
    if (s->peak_device_bytes > 0)
      std::printf(", GPU %.1f MiB", static_cast<double>(s->peak_device_bytes) / (1024.0 * 1024.0));
    std::printf("\n");
    for (auto it = s->formats.begin(); it != s->formats.end(); ++it) {
      std::printf("  %-14s %12lld params  %8.4f bpw\n", it.key().c_str(),
                  static_cast<long long>(it.value().value("params", int64_t{0})),
                  it.value().value("bpw", 0.0));
    }
    for (const std::string& c : s->checks) std::printf("  check: %s\n", c.c_str());
  } else {
    std::printf("stopped after layer %d; rerun the same command to resume\n", a.o.stop_after_layer + 1);
  }
  return 0;
}

Registrar reg{Command{
    "quantize",
    "Quantize a BF16 Hugging Face MoE checkpoint into a gridbook artifact\n"
    "Runs the BF16 teacher one decoder layer at a time over the calibration text, encodes every tensor in "
    "the\n"
    "format its recipe names (NVFP4-CB with CB-GPTQ, FP8 W8A8, BF16 copies), writes OUT.partial/ layer by\n"
    "layer (an interrupted run resumes there), validates the result and renames it to OUT.\n"
    "Examples:\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-laguna --recipe laguna --calib data/code-calib.txt\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-rtn --recipe laguna --calib data/code-calib.txt "
    "--method rtn\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-k12 --recipe experts-k12 --calib data/code-calib.txt "
    "\\\n"
    "      --calib-tokens 16384 --json\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-2.5 --recipe laguna --calib data/code-calib.txt "
    "--budget-bpw 2.5\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-gpu --recipe laguna --calib data/code-calib.txt "
    "--device cuda\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-rot --recipe laguna --calib data/code-calib.txt "
    "--rotate hadamard\n"
    "  gridq quantize models/laguna-tiny-code /tmp/q-2.5p --recipe laguna --calib data/code-calib.txt "
    "--budget-bpw 2.5 --budget-score proxy\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<QuantizeArgs>();
      sub.add_option("SRC", a->o.src, "BF16 Hugging Face checkpoint directory")->required();
      sub.add_option("OUT", a->o.out, "artifact directory to create")->required();
      sub.add_option("--recipe", a->o.recipe, "preset name (recipes/NAME.json) or a recipe JSON file")
          ->required();
      sub.add_option("--calib", a->o.calib, "calibration text file (UTF-8)")->required();
      sub.add_option("--calib-tokens", a->o.calib_tokens, "calibration tokens (default 65536)")
          ->check(CLI::PositiveNumber);
      sub.add_option("--seq-len", a->o.seq_len, "tokens per calibration sequence (default 512)")
          ->check(CLI::Range(2, 1 << 20));
      sub.add_option("--method", a->method, "encoder for every CB and FP8 rule (default: the recipe's)")
          ->check(CLI::IsMember({"cb-gptq", "rtn"}));
      sub.add_option("--budget-bpw", a->o.budget_bpw,
                     "choose the routed-expert rung per layer (K12..K24) by knapsack to this average bpw")
          ->check(CLI::PositiveNumber);
      sub.add_option("--budget-formats", a->o.budget_formats,
                     "with --budget-bpw: candidate formats of the routed-expert stacks (comma list; default "
                     "NVFP4_CB_K12,NVFP4_CB_K16,NVFP4_CB_K20,NVFP4_CB_K24; FP8_CB_K* also work)")
          ->delimiter(',');
      sub.add_option("--budget-score", a->o.budget_score,
                     "with --budget-bpw: measured (default: output KL on calibration text, never worse than "
                     "the best uniform rung that fits, on the held-out split) or proxy (tr(dW H dW^T) alone)")
          ->check(CLI::IsMember({"measured", "proxy"}));
      sub.add_flag("--budget-attention", a->o.budget_attention,
                   "with --budget-bpw: attention q/k/v and o also choose FP8_DYNAMIC or BF16");
      sub.add_option("--codebooks", a->o.codebooks,
                     "codebook tables: lattice, learned (one book per rung, fitted to the routed weights) or "
                     "learned-per-layer (one per rung and layer); default: the recipe's")
          ->check(CLI::IsMember({"lattice", "learned", "learned-per-layer"}));
      sub.add_option("--rotate", a->o.rotate,
                     "rotate the residual stream by a randomized Hadamard matrix folded into the weights "
                     "before quantizing (same BF16 model, an ordinary artifact; default off)")
          ->check(CLI::IsMember({"hadamard"}));
      sub.add_option("--rotate-seed", a->o.rotate_seed, "with --rotate: the seed of the ±1 signs");
      sub.add_option("--threads", a->o.threads, "CPU threads (0 = all); the output does not depend on it")
          ->check(CLI::NonNegativeNumber);
      sub.add_option("--device", a->o.device,
                     "cpu, or cuda: the teacher forward, the Hessians and the NVFP4-CB encoders on the GPU "
                     "(default cpu)")
          ->check(CLI::IsMember({"cpu", "cuda"}));
      sub.add_option("--overlap-capture", a->o.overlap_capture,
                     "capture layer N+1 while layer N is encoded: auto (default: with --device cuda), on or "
                     "off; the output does not depend on it, host memory holds two layers' statistics")
          ->check(CLI::IsMember({"auto", "on", "off"}));
      sub.add_flag("--strict", a->o.strict, "a recipe rule that matches no tensor is an error");
      sub.add_flag("--overwrite", a->o.overwrite, "replace OUT if it exists");
      sub.add_flag("--no-resume", a->no_resume, "discard OUT.partial from an earlier run and start over");
      sub.add_flag("--json", a->json, "print a machine-readable summary on stdout");
      sub.add_flag("--quiet", a->quiet, "no progress output on stderr");
      // Test hook: stop (resumably) after this layer, so tests can interrupt deterministically.
      sub.add_option("--stop-after-layer", a->o.stop_after_layer)->group("");
      return [a] { return run_quantize(*a); };
    }}};

}  // namespace
}  // namespace gridq::cli

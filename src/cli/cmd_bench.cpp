// `gridq bench kernels [--json] [--out FILE] [--filter S] [--replays N] [--no-pdl] [--no-chain] [--diag]
// [--device cuda|auto]`: CUDA decode-kernel benchmark on synthetic Laguna-S-2.1 decode shapes
// (src/runtime/cuda/bench.h). In a build without CUDA the command exists and says so. --device is accepted
// like every run command's, but the kernels exist only on cuda, so `--device cpu` is refused.
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/bench_quant_cli.h"
#include "cli/cli_model.h"
#include "cli/command.h"
#include "cli/grammar_cli.h"

#ifdef GRIDQ_HAVE_CUDA
#include "runtime/cuda/bench.h"
#include "runtime/cuda/bench_decode.h"
#endif

namespace gridq::cli {
namespace {

struct BenchFlags {
  bool json = false;
  std::string out;
  std::string filter;
  int replays = 20;
  bool no_pdl = false;
  long long min_warp_bytes = 0;
  int blocks_per_sm = -1;
  int l2_ahead = -1;
  int beside = 3;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  bool l2_prefetch = false;
  bool diag = false;
  bool no_chain = false;
  std::string device = "auto";
  // bench decode
  std::string model_dir, synthetic;
  std::vector<int> batches{1, 4, 16}, contexts{0, 8192, 32768};
  int steps = 32, warmup = 4;
  uint64_t seed = 1;
  // bench prefill
  std::vector<int> lengths{1024, 8192};
  int repeats = 3;
  long long max_num_batched_tokens = 0;
  bool prefill = false;
};

int run_decode(const BenchFlags& f) {
  const std::string name = f.prefill ? "bench prefill" : "bench decode";
  if (f.device == "cpu") return fail(name + ": --device cpu: it measures the CUDA engine");
  if (f.synthetic.empty() == f.model_dir.empty())
    return fail(name + ": give a MODEL directory or --synthetic NAME (one of them)");
#ifdef GRIDQ_HAVE_CUDA
  cuda::BenchDecodeOptions o;
  o.synthetic = f.synthetic;
  o.model_dir = f.model_dir;
  o.batches = f.prefill ? std::vector<int>{} : f.batches;
  o.contexts = f.prefill ? std::vector<int>{} : f.contexts;
  if (f.prefill) {
    o.prefill = f.lengths;
    o.prefill_repeats = f.repeats;
    o.max_num_batched_tokens = f.max_num_batched_tokens;
  }
  o.steps = f.steps;
  o.warmup = f.warmup;
  o.seed = f.seed;
  o.pdl = !f.no_pdl;
  o.min_warp_bytes = f.min_warp_bytes;
  o.blocks_per_sm = f.blocks_per_sm;
  o.l2_ahead = f.l2_ahead;
  o.beside = f.beside;
  o.temperature = f.temperature, o.top_p = f.top_p, o.top_k = f.top_k;
  auto r = cuda::run_bench_decode(o);
  if (!r.ok()) return fail(name + ": " + r.message());
  if (!f.out.empty()) {
    std::ofstream os(f.out);
    os << r->dump(2) << "\n";
    if (!os) return fail(name + ": cannot write " + f.out);
  }
  if (f.json)
    std::printf("%s\n", r->dump(2).c_str());
  else
    std::printf("%s", cuda::format_bench_decode_table(*r).c_str());
  return 0;
#else
  return fail(name +
              ": this gridq was built without CUDA (configure with -DGRIDQ_CUDA=ON on a machine with nvcc)");
#endif
}

int run_kernels(const BenchFlags& f) {
  if (f.device == "cpu")
    return fail(
        "bench kernels: --device cpu: the decode kernels run only on cuda (use --device cuda or auto)");
#ifdef GRIDQ_HAVE_CUDA
  cuda::BenchOptions o;
  o.filter = f.filter;
  o.replays = f.replays;
  o.pdl = !f.no_pdl;
  o.min_warp_bytes = f.min_warp_bytes;
  o.blocks_per_sm = f.blocks_per_sm;
  o.l2_prefetch = f.l2_prefetch;
  o.diag = f.diag;
  o.chain = !f.no_chain;
  auto r = cuda::run_kernel_bench(o);
  if (!r.ok()) return fail("bench kernels: " + r.message());
  if (!f.out.empty()) {
    std::ofstream os(f.out);
    os << r->dump(2) << "\n";
    if (!os) return fail("bench kernels: cannot write " + f.out);
  }
  if (f.json)
    std::printf("%s\n", r->dump(2).c_str());
  else
    std::printf("%s", cuda::format_bench_table(*r).c_str());
  return 0;
#else
  (void)f;
  return fail(
      "bench kernels: this gridq was built without CUDA (configure with -DGRIDQ_CUDA=ON on a machine with "
      "nvcc)");
#endif
}

const Registrar reg{Command{
    "bench",
    "Benchmarks (kernels: CUDA decode kernels; decode / prefill: the whole model on the CUDA engine; "
    "grammar: "
    "structured-output masks)",
    [](CLI::App& sub) -> std::function<int()> {
      auto flags = std::make_shared<BenchFlags>();
      sub.require_subcommand(1);
      CLI::App* k =
          sub.add_subcommand("kernels", "Time every decode kernel (stacks of 48 weights in a CUDA graph)");
      k->add_flag("--json", flags->json, "Print the result as JSON instead of a table");
      k->add_option("--out", flags->out, "Also write the JSON result to this file");
      k->add_option("--filter", flags->filter, "Only rows whose name contains this string");
      k->add_option("--replays", flags->replays, "Timed graph replays per row (median reported)")
          ->check(CLI::Range(3, 1000));
      k->add_flag("--no-pdl", flags->no_pdl, "Launch without programmatic dependent launch");
      k->add_option("--min-warp-bytes", flags->min_warp_bytes,
                    "Work-split tuning: fewest weight bytes per warp")
          ->check(CLI::NonNegativeNumber);
      k->add_flag("--l2-prefetch", flags->l2_prefetch,
                  "Also bulk-prefetch weight units into L2 (off by default)");
      k->add_flag("--diag", flags->diag,
                  "Also run the diagnostic rows: empty and streaming-read stacks, per-kernel timelines");
      k->add_flag("--no-chain", flags->no_chain, "Skip the persistent-chain version of each stack");
      k->add_option("--blocks-per-sm", flags->blocks_per_sm, "GEMV blocks per SM (0 = all that fit)")
          ->check(CLI::Range(-1, 64));
      k->add_option("--device", flags->device,
                    "cuda or auto (default); the kernels need cuda, so cpu is refused")
          ->check(device_check());
      CLI::App* d = sub.add_subcommand(
          "decode",
          "Whole-model decode tok/s, GB/s and % of copy per (batch, context) on the CUDA engine, with the "
          "kernels\n"
          "a step launches and µs, bytes, GB/s and % of copy per phase of the step\n"
          "Examples:\n"
          "  gridq bench decode --synthetic laguna-s-2.1            # full-size, built on the GPU\n"
          "  gridq bench decode --synthetic laguna-s-2.1 --batches 1 --contexts 0,32768 --out r.json\n"
          "  gridq bench decode build/demo/laguna-tiny-code-gridbook  # an artifact (or HF) directory\n"
          "  gridq bench decode --synthetic laguna-s-2.1 --temperature 0.7 --top-p 0.95  # sampled pass");
      // The options `bench decode` and `bench prefill` share: the model, seed, output and launch switches.
      auto model_options = [flags](CLI::App* c) {
        c->add_option("MODEL", flags->model_dir, "artifact or HF checkpoint directory (or use --synthetic)");
        c->add_option(
            "--synthetic", flags->synthetic,
            "a full-size model of random legal bytes built on the GPU: laguna-s-2.1, laguna-xs-2.1, "
            "laguna-tiny-code");
        c->add_option("--seed", flags->seed, "seed of the synthetic weights and token ids (default 1)");
        c->add_option("--out", flags->out, "also write the JSON result (machine, commit, driver, CUDA) here");
        c->add_flag("--json", flags->json, "print the JSON instead of the table");
        c->add_flag(
            "--no-pdl", flags->no_pdl,
            "launch the forward's kernels without programmatic dependent launch (to measure what it buys)");
        c->add_option(
             "--min-warp-bytes", flags->min_warp_bytes,
             "GEMV work-split tuning: fewest weight bytes per warp (default 8192; changes every matrix's "
             "split, never batch invariance)")
            ->check(CLI::NonNegativeNumber);
        c->add_option("--blocks-per-sm", flags->blocks_per_sm,
                      "GEMV blocks per SM (default 0 = all that fit; a cap leaves room for the next kernel)")
            ->check(CLI::Range(0, 64));
        c->add_option("--l2-ahead", flags->l2_ahead,
                      "weights a step requests into L2 before their kernels, a sum of 1 (the chosen experts, "
                      "after the router), 2 (the next layer's q/k/v, during the MoE), 4 (o_proj, during "
                      "attention), 8 (the chosen experts' down stack, during their gate_up), 16 (the "
                      "router, during attention); default -1: 4 for steps of at most 16 rows, else none")
            ->check(CLI::Range(-1, 31));
        c->add_option(
             "--beside", flags->beside,
             "small matrices run on a side stream beside the main one, a sum of 1 (the shared expert, "
             "beside the router and the routed experts) and 2 (g_proj, beside RoPE and attention); "
             "the others run in place; default 3")
            ->check(CLI::Range(0, 3));
        c->add_option("--device", flags->device, "cuda or auto (default)")->check(device_check());
      };
      model_options(d);
      d->add_option("--batches", flags->batches, "decode batch sizes (default 1,4,16)")
          ->delimiter(',')
          ->check(CLI::Range(1, 4096));
      d->add_option("--contexts", flags->contexts, "context lengths (default 0,8192,32768)")
          ->delimiter(',')
          ->check(CLI::Range(0, 1 << 26));
      d->add_option("--steps", flags->steps, "timed decode steps per cell (default 32)")
          ->check(CLI::Range(1, 10000));
      d->add_option("--warmup", flags->warmup, "untimed steps first (default 4)")->check(CLI::Range(0, 1000));
      d->add_option("--temperature", flags->temperature,
                    "the sampled pass's temperature (default 0: greedy, its tokens checked against the "
                    "logits' argmaxes)")
          ->check(CLI::Range(0.0f, 100.0f));
      d->add_option("--top-p", flags->top_p, "the sampled pass's top-p (default 1: off)")
          ->check(CLI::Range(0.0f, 1.0f));
      d->add_option("--top-k", flags->top_k, "the sampled pass's top-k (default 0: off)")
          ->check(CLI::Range(0, 1 << 20));
      CLI::App* p = sub.add_subcommand(
          "prefill",
          "Prompt prefill tok/s and time to first token on the CUDA engine (one sequence from empty)\n"
          "Examples:\n"
          "  gridq bench prefill --synthetic laguna-s-2.1                 # 1k and 8k prompts\n"
          "  gridq bench prefill --synthetic laguna-s-2.1 --lengths 512,4096 --out r.json");
      model_options(p);
      p->add_option("--lengths", flags->lengths, "prompt lengths (default 1024,8192)")
          ->delimiter(',')
          ->check(CLI::Range(1, 1 << 26));
      p->add_option("--repeats", flags->repeats, "timed prefills per length, after one untimed (default 3)")
          ->check(CLI::Range(1, 100));
      p->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                    "rows of one forward step, as `serve` takes it (default 4096; 64 up to 8192)")
          ->check(CLI::Range(0, 1 << 20));
      auto gf = std::make_shared<BenchGrammarFlags>();
      CLI::App* g = sub.add_subcommand(
          "grammar",
          "Structured outputs: compile time and per-token mask time (p50/p99) over a directory of schemas\n"
          "Examples:\n"
          "  gridq bench grammar --tokenizer models/laguna-tiny-code --schemas tests/grammar/schemas\n"
          "  gridq bench grammar --tokenizer /tmp/qwen151k --schemas tests/grammar/schemas --json --out "
          "r.json");
      g->add_option("--tokenizer", gf->tokenizer, "model directory or tokenizer.json")->required();
      g->add_option("--schemas", gf->schemas,
                    "directory of .json schemas (or test cases with valid instances)")
          ->required();
      g->add_flag("--json", gf->json, "print the JSON result instead of the table");
      g->add_option("--out", gf->out, "also write the JSON result here");
      g->add_flag("--flexible-ws", gf->flexible_ws, "compile with flexible whitespace");
      g->add_option("--repeat", gf->repeat, "passes over the schemas (default 1)")
          ->check(CLI::Range(1, 1000));
      auto qf = std::make_shared<BenchQuantFlags>();
      CLI::App* qz = sub.add_subcommand(
          "quantize",
          "GPU CB-GPTQ (factorization + encode) of one MoE layer's routed experts at a model's shapes, on\n"
          "synthetic weights and Hessians built on the GPU; seconds per layer and for the whole model\n"
          "Examples:\n"
          "  gridq bench quantize                                  # Laguna-S-2.1, all 256 experts, K16\n"
          "  gridq bench quantize --experts 32 --rtn --out r.json  # a slice, scaled to the layer");
      qz->add_option("--shape", qf->shape, "laguna-s-2.1 (default), laguna-xs-2.1 or laguna-tiny-code");
      qz->add_option("--rung", qf->rung, "NVFP4_CB_K16 (default) or NVFP4_CB_K12");
      qz->add_option("--experts", qf->experts,
                     "experts encoded (default 0: all of the layer's; fewer are scaled to the layer)")
          ->check(CLI::Range(0, 4096));
      qz->add_option("--chunk", qf->chunk, "experts per batch (default 32)")->check(CLI::Range(1, 1024));
      qz->add_option("--rows", qf->rows, "calibration rows behind each expert's Hessian (default 5120)")
          ->check(CLI::Range(1, 1 << 24));
      qz->add_option("--seed", qf->seed, "seed of the synthetic inputs (default 1)");
      qz->add_option("--refine-passes", qf->refine_passes,
                     "refinement passes after CB-GPTQ, scales on (default 8, the laguna recipe's; 0: off)")
          ->check(CLI::Range(0, 64));
      qz->add_flag("--rtn", qf->rtn, "also time the round-to-nearest encode (the holdout gate's other side)");
      qz->add_flag("--json", qf->json, "print the JSON result instead of the summary");
      qz->add_option("--out", qf->out, "also write the JSON result here");
      auto kf = std::make_shared<BenchCheckpointFlags>();
      CLI::App* ck = sub.add_subcommand(
          "checkpoint",
          "Write a synthetic BF16 Hugging Face checkpoint at a model's real shapes (random weights of "
          "realistic\n"
          "scale, the HF shard layout, another model's tokenizer) for full-size quantizer runs\n"
          "Examples:\n"
          "  gridq bench checkpoint --out /tmp/laguna-s-3l             # Laguna-S-2.1, layers 0 (dense), 1, "
          "2\n"
          "  gridq bench checkpoint --shape laguna-xs-2.1 --layers 4 --out /tmp/xs4 --json");
      ck->add_option("--shape", kf->shape, "laguna-s-2.1 (default), laguna-xs-2.1 or laguna-tiny-code");
      ck->add_option("--layers", kf->layers, "decoder layers kept (default 3: the dense layer 0 and two MoE)")
          ->check(CLI::Range(1, 1024));
      ck->add_option("--seed", kf->seed, "seed of the weights (default 1)");
      ck->add_option("--tokenizer-from", kf->tokenizer_from,
                     "model directory whose tokenizer files are copied (default models/laguna-tiny-code)");
      ck->add_option("--out", kf->out, "checkpoint directory to create (must not exist)")->required();
      ck->add_flag("--json", kf->json, "print a JSON summary");
      return [flags, d, p, g, gf, qz, qf, ck, kf]() {
        if (ck->parsed()) return run_bench_checkpoint(*kf);
        if (qz->parsed()) return run_bench_quant(*qf);
        if (g->parsed()) return run_bench_grammar(*gf);
        if (p->parsed()) {
          flags->prefill = true;
          return run_decode(*flags);
        }
        return d->parsed() ? run_decode(*flags) : run_kernels(*flags);
      };
    }}};

}  // namespace
}  // namespace gridq::cli

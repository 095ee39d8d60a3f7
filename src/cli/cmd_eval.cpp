// gridq eval: perplexity over windows of a text file (KL against a teacher plugs into the same pass
// through eval::WindowSink).
#include <fstream>
#include <sstream>
#include <string>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "eval/perplexity.h"

namespace gridq::cli {
namespace {

struct EvalArgs {
  std::string model, text_file;
  int64_t tokens = 0;
  int window = 512;
  int batch = 1;
  bool json = false;
  RunOptions run;
};

int run_eval(const EvalArgs& a) {
  std::ifstream f(a.text_file, std::ios::binary);
  if (!f) return fail(a.text_file + ": cannot open text file");
  std::stringstream ss;
  ss << f.rdbuf();
  auto tok = open_tokenizer(a.model);
  if (!tok.ok()) return fail(tok.message());
  auto ids = tok->encode(ss.str(), /*add_special_tokens=*/false);
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());
  eval::PerplexityOptions o;
  o.max_tokens = a.tokens;
  o.window = a.window;
  o.batch = a.batch;
  auto r = eval::perplexity(**eng, ids, o);
  if (!r.ok()) return fail(r.message());
  const double tps = r->seconds > 0 ? static_cast<double>(r->tokens) / r->seconds : 0.0;
  if (a.json) {
    std::printf("{\"ppl\": %.6f, \"mean_nll\": %.8f, \"positions\": %lld, \"windows\": %lld, \"tokens\": %lld, "
                "\"window\": %d, \"seconds\": %.3f, \"tokens_per_second\": %.1f}\n",
                r->ppl, r->mean_nll, static_cast<long long>(r->positions), static_cast<long long>(r->windows),
                static_cast<long long>(r->tokens), a.window, r->seconds, tps);
  } else {
    std::printf("perplexity %.4f over %lld positions (%lld windows of <= %d tokens), %.1f tok/s\n", r->ppl,
                static_cast<long long>(r->positions), static_cast<long long>(r->windows), a.window, tps);
  }
  return 0;
}

Registrar reg{Command{
    "eval",
    "Perplexity of a model on a text file, over non-overlapping windows\n"
    "Examples:\n"
    "  gridq eval models/laguna-tiny-code --text data/code-eval.txt --tokens 16384\n"
    "  gridq eval models/laguna-tiny-code --text data/code-eval.txt --window 512 --json\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<EvalArgs>();
      sub.add_option("MODEL", a->model, "HF checkpoint directory")->required();
      sub.add_option("--text", a->text_file, "UTF-8 text file")->required();
      sub.add_option("--tokens", a->tokens, "use only the first N tokens (0 = all)");
      sub.add_option("--window", a->window, "tokens per window")->check(CLI::Range(2, 1 << 20));
      sub.add_option("--batch", a->batch, "windows per forward")->check(CLI::PositiveNumber);
      sub.add_flag("--json", a->json, "print one JSON object (keys ppl, positions, ...)");
      add_run_options(sub, a->run);
      return [a] { return run_eval(*a); };
    }}};

}  // namespace
}  // namespace gridq::cli

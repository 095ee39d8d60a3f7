// gridq generate: stream a continuation of a prompt, then one speed line on stderr. With --chat the answer's
// reasoning block is shown as `gridq chat` shows it (cli/think_printer.h).
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "cli/prompt_format.h"
#include "cli/think_printer.h"
#include "runtime/generate.h"
#include "text/reasoning_parser.h"

namespace gridq::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  bool chat = false;
  bool no_think = false;
  bool hide_thinking = false;
  bool allow_special = false;
  RunOptions run;
  SamplingCli sampling;
};

int run_generate(const GenerateArgs& a) {
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());
  auto tok = open_tokenizer(a.model);
  if (!tok.ok()) return fail(tok.message());
  runtime::SamplingParams p = to_params(a.sampling);
  p.stop_token_ids = eos_ids(**eng);
  std::vector<int32_t> ids;
  if (a.chat) {
    auto enc = encode_chat(a.model, *tok, {ChatTurn{"user", a.prompt}}, !a.no_think, a.allow_special);
    if (!enc.ok()) return fail(enc.message());
    ids = std::move(*enc);
    const int32_t end_asst = tok->token_id("</assistant>");
    if (end_asst >= 0) p.stop_token_ids.push_back(end_asst);
  } else {
    // A plain prompt is text too: "<|endoftext|>" typed in it is not the control id unless asked for.
    auto enc = tok->try_encode(a.prompt, /*add_special_tokens=*/true, /*match_added_tokens=*/a.allow_special);
    if (!enc.ok()) return fail(enc.message());
    ids = std::move(*enc);
  }
  if (ids.empty()) return fail("the prompt encodes to no tokens");
  warn_past_context(**eng, a.run, ids.size(), a.sampling.max_tokens);
  if (!a.chat) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  runtime::Sampler sampler(p);
  // A plain continuation is printed as decoded; a chat answer splits its reasoning block from the answer.
  std::optional<ThinkPrinter> printer;
  if (a.chat) {
    const text::ReasoningMarkers markers{tok->token_id("<think>"), tok->token_id("</think>"),
                                         tok->token_id("<assistant>")};
    printer.emplace(text::initial_reasoning_mode(ids, markers) == text::ReasoningMode::kReasoning,
                    a.hide_thinking, isatty(STDOUT_FILENO) != 0);
  }
  auto r = runtime::generate(**eng, *tok, ids, a.sampling.max_tokens, sampler, [&](const std::string& piece) {
    if (printer) {
      printer->push(piece);
      return true;
    }
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  if (!r.ok()) return fail(r.message());
  if (printer) {
    printer->finish();
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  const double pf = r->prefill_seconds > 0 ? static_cast<double>(r->prompt_tokens) / r->prefill_seconds : 0.0;
  const double dc = r->decode_seconds > 0 ? static_cast<double>(r->tokens.size()) / r->decode_seconds : 0.0;
  std::fprintf(
      stderr,
      "[gridq] prompt %lld tok, prefill %.1f tok/s | generated %zu tok, decode %.1f tok/s | finish %s\n",
      static_cast<long long>(r->prompt_tokens), pf, r->tokens.size(), dc, r->finish_reason.c_str());
  return 0;
}

Registrar reg{Command{
    "generate",
    "Continue a prompt, streaming text to stdout (--device picks cpu or cuda; the chosen device is logged).\n"
    "With --chat the reasoning block is dimmed on a terminal; when stdout is not a terminal it is printed\n"
    "between <think> and </think> before the answer (--hide-thinking leaves it out; docs/cli.md)\n"
    "Examples:\n"
    "  gridq generate models/laguna-tiny-code --prompt \"def fibonacci(n):\"\n"
    "  gridq generate models/laguna-tiny-code --prompt \"import os\" --temperature 0.8 --top-p 0.95 --seed "
    "7\n"
    "  gridq generate models/laguna-tiny-code --prompt \"Hi\" --chat --max-tokens 32\n"
    "  gridq generate models/laguna-tiny-code --prompt \"def f(x):\" --device cpu --threads 2\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenerateArgs>();
      sub.add_option("MODEL", a->model, "HF checkpoint or gridbook artifact directory")->required();
      sub.add_option("--prompt", a->prompt, "prompt text")->required();
      sub.add_flag("--chat", a->chat, "wrap the prompt as one user turn with the model's chat template");
      sub.add_flag("--no-think", a->no_think, "with --chat: generation prompt without thinking");
      sub.add_flag("--hide-thinking", a->hide_thinking, "with --chat: do not print the reasoning block");
      sub.add_flag(
          "--allow-special-tokens", a->allow_special,
          "encode special-token text in the prompt (\"</think>\", \"<|endoftext|>\") as the control ids "
          "instead of as text");
      add_sampling_options(sub, a->sampling);
      add_run_options(sub, a->run);
      return [a] { return run_generate(*a); };
    }}};

}  // namespace
}  // namespace gridq::cli

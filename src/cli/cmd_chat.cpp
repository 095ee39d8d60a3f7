// gridq chat: interactive multi-turn chat with the model's own chat template. Generation stops on
// </assistant> or EOS; the reasoning block is dimmed on a terminal, kept between <think> and </think>
// elsewhere (cli/think_printer.h), or left out with --hide-thinking.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/cli_model.h"
#include "cli/command.h"
#include "cli/prompt_format.h"
#include "cli/think_printer.h"
#include "runtime/generate.h"
#include "text/reasoning_parser.h"

namespace gridq::cli {
namespace {

struct ChatArgs {
  std::string model;
  std::string system;
  bool no_think = false;
  bool hide_thinking = false;
  bool allow_special = false;
  RunOptions run;
  SamplingCli sampling;
};

// Ctrl-C during an answer stops that answer and keeps the conversation (issue 14 item 12); at the prompt it
// ends the chat. The handler only sets a flag; without SA_RESTART the prompt's read returns, so getline
// fails.
std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted.store(true); }

int run_chat(const ChatArgs& a) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  auto eng = open_engine(a.model, a.run);
  if (!eng.ok()) return fail(eng.message());
  auto tok = open_tokenizer(a.model);
  if (!tok.ok()) return fail(tok.message());
  runtime::SamplingParams p = to_params(a.sampling);
  p.stop_token_ids = eos_ids(**eng);
  const int32_t end_asst = tok->token_id("</assistant>");
  if (end_asst >= 0) p.stop_token_ids.push_back(end_asst);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const text::ReasoningMarkers markers{tok->token_id("<think>"), tok->token_id("</think>"),
                                       tok->token_id("<assistant>")};
  std::vector<ChatTurn> history;
  if (!a.system.empty()) history.push_back({"system", a.system});
  std::fprintf(
      stderr, "gridq chat: %s (empty line, Ctrl-D or Ctrl-C at the prompt to quit; Ctrl-C stops an answer)\n",
      a.model.c_str());
  std::string line;
  uint64_t turn = 0;
  for (;;) {
    if (tty) std::fputs("> ", stdout);
    std::fflush(stdout);
    g_interrupted.store(false);
    if (!std::getline(std::cin, line) || line.empty() || g_interrupted.load()) break;
    history.push_back({"user", line});
    auto enc = encode_chat(a.model, *tok, history, !a.no_think, a.allow_special);
    if (!enc.ok()) return fail(enc.message());
    const std::vector<int32_t> ids = std::move(*enc);
    warn_past_context(**eng, a.run, ids.size(), a.sampling.max_tokens);
    runtime::SamplingParams tp = p;
    tp.seed = p.seed + turn++;
    runtime::Sampler sampler(tp);
    // The generation prompt ends with <think> when thinking is on: the answer starts inside it.
    ThinkPrinter printer(text::initial_reasoning_mode(ids, markers) == text::ReasoningMode::kReasoning,
                         a.hide_thinking, tty);
    auto r =
        runtime::generate(**eng, *tok, ids, a.sampling.max_tokens, sampler, [&](const std::string& piece) {
          printer.push(piece);
          return !g_interrupted.load();
        });
    if (!r.ok()) return fail(r.message());
    printer.finish();
    if (g_interrupted.exchange(false)) std::fputs("[answer stopped; Ctrl-C at the prompt quits]\n", stderr);
    history.push_back({"assistant", printer.answer});
  }
  return 0;
}

Registrar reg{Command{
    "chat",
    "Interactive chat with a model using its chat template (stops on </assistant> and EOS). The reasoning\n"
    "block is dimmed on a terminal; when stdout is not a terminal it is printed between <think> and "
    "</think>\n"
    "before the answer (--hide-thinking leaves it out; docs/cli.md)\n"
    "Examples:\n"
    "  gridq chat models/laguna-tiny-code\n"
    "  gridq chat models/laguna-tiny-code --no-think --temperature 0.7 --seed 1\n"
    "  echo 'write a haiku' | gridq chat models/laguna-tiny-code --hide-thinking\n",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ChatArgs>();
      a->sampling.max_tokens = 256;
      sub.add_option("MODEL", a->model, "HF checkpoint or gridbook artifact directory")->required();
      sub.add_option("--system", a->system, "system prompt (default: the template's)");
      sub.add_flag("--no-think", a->no_think, "generation prompt without thinking");
      sub.add_flag("--hide-thinking", a->hide_thinking, "do not print the reasoning block");
      sub.add_flag(
          "--allow-special-tokens", a->allow_special,
          "encode special-token text typed in a turn (\"</think>\", \"<tool_call>\") as the control ids "
          "instead of as text");
      add_sampling_options(sub, a->sampling);
      add_run_options(sub, a->run);
      return [a] { return run_chat(*a); };
    }}};

}  // namespace
}  // namespace gridq::cli

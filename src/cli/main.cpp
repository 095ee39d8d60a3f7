// gridq: one program, one subcommand per job (architecture.md). Commands live in cmd_*.cpp files.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "core/version.h"

// A CUDA build registers its backend at start (runtime/device.h); without it --device auto runs on cpu and
// --device cuda is refused.
#if defined(GRIDQ_HAVE_CUDA)
#include "runtime/cuda/register.h"
#endif

namespace gridq::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "gridq: error: %s\n", message.c_str());
  return 1;
}

}  // namespace gridq::cli

int main(int argc, char** argv) {
  using namespace gridq::cli;
#if defined(GRIDQ_HAVE_CUDA)
  // Before any command runs: choose_device (--device) sees the CUDA backend only through this registration.
  gridq::cuda::register_backend();
#endif
  CLI::App app{
      "gridq: quantize and serve Mixture-of-Experts language models (gridbook format)\n"
      "Examples:\n"
      "  gridq inspect models/laguna-tiny-code\n"
      "  gridq generate models/laguna-tiny-code --prompt \"def fibonacci(n):\"\n"};
  app.set_version_flag("--version", std::string(gridq::version_string()) + " (" + gridq::git_commit() + ")");
  app.require_subcommand(1);
  // Every option's default shows in --help (subcommands copy these settings when they are added).
  app.option_defaults()->always_capture_default();
  auto& cmds = registry();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::function<int()> action;
  for (auto& c : cmds) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    auto run = c.setup(*sub);
    sub->callback([&action, run] { action = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return action ? action() : 0;
}

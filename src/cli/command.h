// Subcommand registry: each src/cli/cmd_*.cpp registers itself with a static Registrar, so adding a
// command never touches main.cpp. `setup` declares the CLI11 subcommand's options; `run` executes it and
// returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace gridq::cli {

struct Command {
  std::string name;
  std::string help;
  // Declares options on `sub` and returns the action to run when the subcommand was chosen.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& registry();

struct Registrar {
  explicit Registrar(Command c) { registry().push_back(std::move(c)); }
};

// Prints "gridq: error: <message>" to stderr and returns the exit code for a failed command.
int fail(const std::string& message);

}  // namespace gridq::cli

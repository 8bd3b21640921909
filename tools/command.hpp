// Subcommand registry of the `modelmem` tool. Each tools/<name>.cpp defines one subcommand and
// registers it with a static CommandRegistration, so adding a command touches no other file.
#pragma once

#include <CLI/CLI.hpp>

namespace modelmem::tools {

/// Adds the subcommand to `app`. The subcommand's callback stores its exit code (0 success,
/// 1 "did not fit / not found", 2 bad input) in `exit_code`. Errors may also be thrown:
/// InvalidInput becomes exit code 2, other modelmem errors exit code 1.
using CommandSetup = void (*)(CLI::App& app, int& exit_code);

struct CommandRegistration {
  /// `order` sorts the commands in --help.
  CommandRegistration(int order, CommandSetup setup);
};

}  // namespace modelmem::tools

// `modelmem config [STRING]`: parses a configuration string (default: $MODELMEM_ALLOC_CONF),
// builds the allocator stack exactly as a program would, and prints what it got: every key's
// effective value, the device, the virtual-memory probe and any fallback taken.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.hpp"
#include "modelmem/config/factory.hpp"

namespace modelmem::tools {
namespace {

struct Args {
  std::string text;
  bool given = false;
  bool keys = false;
};

int run(const Args& args) {
  if (args.keys) {
    std::fputs(config::keys_markdown().c_str(), stdout);
    return 0;
  }
  std::string text = args.text;
  std::string from = "the argument";
  if (!args.given) {
    const char* env = std::getenv("MODELMEM_ALLOC_CONF");
    text = env ? env : "";
    from = env ? "MODELMEM_ALLOC_CONF" : "defaults (MODELMEM_ALLOC_CONF is not set)";
  }
  std::fputs(config::config_report(text, from).c_str(), stdout);
  return 0;
}

void setup(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "config",
      "Parse an allocator configuration (default: $MODELMEM_ALLOC_CONF), build the stack as a "
      "program would, and print every effective setting, the probe's result and the fallback");
  cmd->add_option("STRING", args->text, "key:value,key:value (see --keys)");
  cmd->add_flag("--keys", args->keys, "List every key as a Markdown table and exit");
  cmd->callback([args, cmd, &exit_code] {
    args->given = cmd->count("STRING") > 0;
    exit_code = run(*args);
  });
}

CommandRegistration reg(60, &setup);

}  // namespace
}  // namespace modelmem::tools

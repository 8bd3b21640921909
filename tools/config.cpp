// `modelmem config [STRING]`: parses a configuration string (default: $MODELMEM_ALLOC_CONF),
// builds the allocator stack exactly as a program would, and prints what it got: every key's
// effective value, the device, the virtual-memory probe and any fallback taken.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "command.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::tools {
namespace {

struct Args {
  std::string text;
  bool given = false;
  bool keys = false;
};

// Table cells may not hold a bare '|'.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

void print_keys() {
  std::printf("| key | default | values | meaning |\n|---|---|---|---|\n");
  for (const auto& k : config::config_keys())
    std::printf("| `%s` | %s | %s | %s |\n", k.name.c_str(),
                k.default_value.empty() ? "-" : ("`" + k.default_value + "`").c_str(),
                cell(k.values).c_str(), cell(k.meaning).c_str());
}

int run(const Args& args) {
  if (args.keys) {
    print_keys();
    return 0;
  }
  std::string text = args.text;
  std::string from = "the argument";
  if (!args.given) {
    const char* env = std::getenv("MODELMEM_ALLOC_CONF");
    text = env ? env : "";
    from = env ? "MODELMEM_ALLOC_CONF" : "defaults (MODELMEM_ALLOC_CONF is not set)";
  }
  config::Config config = config::parse_config(text);
  // Built before anything is printed: a string the factory rejects prints its one error line.
  config::Built built = config::build(config);
  std::printf("config: \"%s\" (from %s)\n", text.c_str(), from.c_str());
  std::printf("keys (* = given):\n");
  for (const auto& k : config::config_keys()) {
    std::string v = config.get(k.name);
    std::printf("  %c %-30s %s\n", config.has(k.name) ? '*' : ' ', k.name.c_str(),
                v.empty() ? "-" : v.c_str());
  }
  std::printf("stack:\n");
  for (const auto& [key, value] : built.settings)
    std::printf("    %-30s %s\n", key.c_str(), value.c_str());
  std::printf("probe:     %s\n", built.probe.c_str());
  std::printf("fallback:  %s\n", built.fallback_warning ? built.fallback_warning->c_str() : "none");
  std::printf("allocator: %s\n", built.allocator->describe().c_str());
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

// `modelmem config [STRING]`: parses a configuration string (default: $MODELMEM_ALLOC_CONF, else
// torch_npu's $PYTORCH_NPU_ALLOC_CONF translated),
// builds the allocator stack exactly as a program would, and prints what it got: every key's
// effective value, the device, the virtual-memory probe and any fallback taken.
#include <cstdio>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/config/torch_npu.hpp"

namespace modelmem::tools {
namespace {

struct ConfigArgs {
  std::string text;
  bool given = false;
  bool keys = false;
};

int run_config(const ConfigArgs& args) {
  if (args.keys) {
    std::fputs(config::keys_markdown().c_str(), stdout);
    return 0;
  }
  std::string text = args.text;
  std::string from = "the argument";
  std::vector<std::string> notes;
  if (!args.given) {
    // What the environment's setting builds, read as the NPU library reads it.
    const config::EnvironmentConf env = config::environment_conf();
    text = env.text;
    notes = env.notes;
    if (env.variable.empty()) {
      from = "defaults (MODELMEM_ALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are not set)";
    } else if (env.translated) {
      // torch_npu's variable is read by the NPU library, which builds on the NPU.
      text = text.empty() ? "device:npu" : "device:npu," + text;
      from = env.variable + ", torch_npu's, translated as libmodelmem_npu_alloc.so reads it";
    } else {
      from = env.variable;
    }
  }
  std::fputs(config::config_report(text, from).c_str(), stdout);
  // The torch_npu keys the library maps to modelmem's nearest behaviour, as it says them.
  for (const std::string& note : notes) std::printf("note:      %s\n", note.c_str());
  return 0;
}

void setup_config(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* cmd = app.add_subcommand(
      "config",
      "Parse an allocator configuration (default: $MODELMEM_ALLOC_CONF, else torch_npu's "
      "$PYTORCH_NPU_ALLOC_CONF translated), build the stack as a "
      "program would, and print every effective setting, the probe's result and the fallback");
  cmd->add_option("STRING", args->text, "key:value,key:value (see --keys)");
  cmd->add_flag("--keys", args->keys, "List every key as a Markdown table and exit");
  cmd->callback([args, cmd, &exit_code] {
    args->given = cmd->count("STRING") > 0;
    exit_code = run_config(*args);
  });
}

CommandRegistration config_registration(60, &setup_config);

}  // namespace
}  // namespace modelmem::tools

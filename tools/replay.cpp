// `modelmem replay TRACE [--strategy NAME|all] [--config STR]`: replays a trace through
// allocation strategies and prints one table (or JSON) comparing them. Parses its flags, calls
// trace::run_replay and prints one of the library's renderers.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::tools {
namespace {

struct ReplayArgs {
  trace::ReplayRequest request;
  bool no_touch = false;
  bool json = false;
  std::string device_memory;
};

void setup_replay(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  std::string names;
  for (const auto& s : trace::replay_strategies()) names += (names.empty() ? "" : ", ") + s.name;
  CLI::App* cmd =
      app.add_subcommand("replay", "Replay a trace through allocation strategies and compare them");
  cmd->add_option("trace", args->request.trace, "trace CSV")->required();
  cmd->add_option("--strategy", args->request.strategy,
                  "one of: " + names + ", config (the --config string alone), or all");
  cmd->add_option("--config", args->request.config,
                  "also replay the allocator this config string builds (MODELMEM_ALLOC_CONF "
                  "syntax), as strategy 'config', beside --strategy");
  cmd->add_option("--repeat", args->request.options.repeat,
                  "replays of the whole trace per strategy")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-touch", args->no_touch, "do not write to the memory handed out");
  cmd->add_flag("--skip-bad", args->request.read.skip_bad,
                "skip malformed trace lines (counted in a warning) instead of stopping");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->add_option("--device-memory", args->device_memory,
                  "memory of the device a snapshot was taken on (80GiB, 81920MiB, bytes): the "
                  "replays simulate that device (default: not limited)");
  cmd->callback([args, &exit_code] {
    if (!args->device_memory.empty())
      args->request.device_capacity = parse_size(args->device_memory, "--device-memory");
    args->request.options.touch = !args->no_touch;
    trace::ReplayReport report = trace::run_replay(args->request);
    for (const auto& w : report.warnings) fmt::print(stderr, "warning: {}\n", w);
    if (args->json)
      fmt::print("{}\n", trace::to_json(report).dump(2));
    else
      fmt::print("{}", trace::to_text(report));
    // An out-of-memory replay is a failed one (docs/commands.md): exit code 1, report printed.
    bool oom = false;
    for (const auto& r : report.results) oom = oom || r.ooms > 0;
    exit_code = oom ? 1 : 0;
  });
}

CommandRegistration replay_registration(50, &setup_replay);

}  // namespace
}  // namespace modelmem::tools

// `modelmem analyze TRACE`: summary and diagnosis of a recorded allocation trace. Parses its
// flags, reads the trace, calls trace::analyze (and allocation_sites for snapshots and stacks)
// and prints the library's renderers.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/model/plan_model.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::tools {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> traces;
  bool json = false;
  trace::ReadOptions read;
  trace::AnalyzeOptions options;
  std::string device_memory;
};

void setup_analyze(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "analyze",
      "Summarise an allocation trace and advise: planned arena, buckets, config strings");
  cmd->add_option("trace", args->traces,
                  "trace CSV (modelmem or the shared PyTorch format) or a PyTorch memory snapshot "
                  "pickle; several files (T.csv T.*.csv of one `run --trace`) are read as one")
      ->required();
  cmd->add_flag("--json", args->json, "print the analysis as JSON");
  cmd->add_flag("--skip-bad", args->read.skip_bad,
                "skip malformed lines (counted in the notes) instead of stopping at the first");
  cmd->add_option("--solver", args->options.solver,
                  "solver for one step's plan (default: the best of the heuristics)");
  cmd->add_option("--time-limit", args->options.time_limit_s, "seconds for a searching solver")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device-memory", args->device_memory,
                  "memory of the device a snapshot was taken on (80GiB, 81920MiB, bytes): its "
                  "replays simulate that device (default: not limited)");
  cmd->callback([args, &exit_code] {
    if (!args->device_memory.empty())
      args->options.device_capacity = parse_size(args->device_memory, "--device-memory");
    trace::Trace t = trace::read_traces(
        std::vector<std::filesystem::path>(args->traces.begin(), args->traces.end()), args->read);
    trace::Analysis a = trace::analyze(t, args->options);
    const auto sites = trace::allocation_sites(t);  // snapshot frames, MemoryLogger stacks
    if (args->json) {
      std::printf("%s\n", trace::to_json(a, sites).dump(2).c_str());
    } else {
      std::fputs(trace::to_text(a).c_str(), stdout);
      std::fputs(trace::sites_text(sites).c_str(), stdout);
    }
    exit_code = 0;
  });
}

CommandRegistration analyze_registration(40, &setup_analyze);

}  // namespace
}  // namespace modelmem::tools

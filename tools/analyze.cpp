// `modelmem analyze TRACE`: summary and diagnosis of a recorded allocation trace.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::tools {
namespace {

struct AnalyzeArgs {
  std::string trace;
  bool json = false;
  bool strict = false;
  std::string solver;
  double time_limit = 2.0;
};

void setup(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "analyze", "Summarise an allocation trace and advise: static arena, buckets, config keys");
  cmd->add_option(
         "trace", args->trace,
         "trace CSV (modelmem or the shared PyTorch format) or a PyTorch memory snapshot pickle")
      ->required();
  cmd->add_flag("--json", args->json, "print the analysis as JSON");
  cmd->add_flag("--strict", args->strict, "fail on the first malformed line instead of skipping");
  cmd->add_option("--solver", args->solver,
                  "solver for one step's plan (default: the best of the heuristics)");
  cmd->add_option("--time-limit", args->time_limit, "seconds for a searching solver")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, &exit_code] {
    trace::ReadOptions read;
    read.strict = args->strict;
    trace::Trace t = trace::read_trace(args->trace, read);
    trace::AnalyzeOptions options;
    options.solver = args->solver;
    options.time_limit_s = args->time_limit;
    trace::Analysis a = trace::analyze(t, options);
    const auto sites = trace::allocation_sites(t);  // snapshot frames, MemoryLogger stacks
    if (args->json) {
      nlohmann::json j = trace::to_json(a);
      j["sites"] = nlohmann::json::array();
      for (const auto& s : sites)
        j["sites"].push_back({{"site", s.site},
                              {"allocs", s.allocs},
                              {"bytes", s.bytes},
                              {"live_at_end", s.live_at_end}});
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::fputs(trace::to_text(a).c_str(), stdout);
      std::fputs(trace::sites_text(sites).c_str(), stdout);
    }
    exit_code = 0;
  });
}

CommandRegistration reg(40, &setup);

}  // namespace
}  // namespace modelmem::tools

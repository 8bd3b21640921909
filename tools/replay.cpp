// `modelmem replay TRACE [--strategy NAME|all]`: replays a trace through allocation strategies
// and prints one table (or JSON) comparing them.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::tools {
namespace {

struct ReplayArgs {
  std::string trace;
  std::string strategy = "all";
  std::size_t repeat = 1;
  std::string config;
  bool no_touch = false;
  bool json = false;
};

std::string mib(std::size_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20));
}

void setup(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  std::string names;
  for (const auto& s : trace::replay_strategies()) names += (names.empty() ? "" : ", ") + s.name;
  CLI::App* cmd =
      app.add_subcommand("replay", "Replay a trace through allocation strategies and compare them");
  cmd->add_option("trace", args->trace, "trace CSV")->required();
  cmd->add_option("--strategy", args->strategy, "one of: " + names + ", or all");
  cmd->add_option("--config", args->config,
                  "also replay the allocator this config string builds (MODELMEM_ALLOC_CONF "
                  "syntax), as strategy 'config'");
  cmd->add_option("--repeat", args->repeat, "replays of the whole trace per strategy")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-touch", args->no_touch, "do not write to the memory handed out");
  cmd->add_flag("--json", args->json, "print JSON");
  cmd->callback([args, &exit_code] {
    trace::Trace t = trace::read_trace(args->trace);
    for (const auto& w : t.warnings) fmt::print(stderr, "warning: {}\n", w);
    std::vector<const trace::ReplayStrategy*> chosen;
    for (const auto& s : trace::replay_strategies())
      if (args->strategy == "all" || args->strategy == s.name) chosen.push_back(&s);
    trace::ReplayStrategy from_config{"config", args->config,
                                      [args](const trace::StrategyContext&) {
                                        return trace::allocator_from_config(args->config);
                                      }};
    if (!args->config.empty()) {
      trace::allocator_from_config(args->config);  // a bad string fails before any replay
      if (args->strategy == "all" || args->strategy == "config") chosen.push_back(&from_config);
    }
    if (chosen.empty()) {
      std::string known;
      for (const auto& s : trace::replay_strategies())
        known += (known.empty() ? "" : ", ") + s.name;
      throw InvalidInput(
          fmt::format("unknown strategy '{}' (known: {}, all)", args->strategy, known));
    }
    trace::Analysis analysis = trace::analyze(t);
    trace::StrategyContext context{t, analysis.best_fit_pool + analysis.best_fit_pool / 10,
                                   analysis.marks > 0};
    trace::ReplayOptions options;
    options.touch = !args->no_touch;
    options.repeat = args->repeat;
    std::vector<trace::ReplayResult> results;
    for (const auto* s : chosen) {
      auto allocator = s->make(context);
      trace::ReplayResult r = trace::replay(t, *allocator, options);
      r.strategy = s->name;
      results.push_back(std::move(r));
    }
    if (args->json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : results)
        j.push_back({{"strategy", r.strategy},
                     {"description", r.description},
                     {"peak_reserved", r.peak_reserved},
                     {"peak_live", r.peak_live},
                     {"peak_allocated", r.peak_allocated},
                     {"reserved_per_live", r.reserved_per_live()},
                     {"fragmentation_at_peak", r.fragmentation_at_peak},
                     {"device_calls", r.device_calls},
                     {"mean_ns", r.mean_ns},
                     {"p99_ns", r.p99_ns},
                     {"ooms", r.ooms},
                     {"allocs", r.allocs},
                     {"notes", r.notes}});
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("trace {}: {} events, peak live {} (trace)\n", t.name, t.events.size(),
                 format_bytes(analysis.peak_live));
      fmt::print("{:<20} {:>13} {:>13} {:>8} {:>6} {:>8} {:>10} {:>10} {:>5}\n", "strategy",
                 "reserved MiB", "live MiB", "res/live", "frag", "dev calls", "mean ns", "p99 ns",
                 "OOMs");
      for (const auto& r : results)
        fmt::print("{:<20} {:>13} {:>13} {:>8.2f} {:>6.2f} {:>8} {:>10.0f} {:>10.0f} {:>5}\n",
                   r.strategy, mib(r.peak_reserved), mib(r.peak_live), r.reserved_per_live(),
                   r.fragmentation_at_peak, r.device_calls, r.mean_ns, r.p99_ns, r.ooms);
      for (const auto& r : results)
        for (const auto& n : r.notes) fmt::print("note ({}): {}\n", r.strategy, n);
    }
    exit_code = 0;
  });
}

CommandRegistration reg(50, &setup);

}  // namespace
}  // namespace modelmem::tools

// `modelmem replay` as a library call: the request checked, every strategy replayed, and the
// table / JSON renderers that the command line and the Python package share.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/replay.hpp"
#include "modelmem/trace/snapshot.hpp"

namespace modelmem::trace {

namespace {

std::string mib(std::size_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20));
}

std::string known_strategies() {
  std::string known;
  for (const auto& s : replay_strategies()) known += (known.empty() ? "" : ", ") + s.name;
  return known + ", config, all";
}

}  // namespace

ReplayReport run_replay(const ReplayRequest& request) {
  // Validate first: the names and the config string, then the file.
  const bool all = request.strategy == "all";
  std::vector<const ReplayStrategy*> chosen;
  for (const auto& s : replay_strategies())
    if (all || request.strategy == s.name) chosen.push_back(&s);
  if (chosen.empty() && request.strategy != "config")
    throw InvalidInput(
        fmt::format("unknown strategy '{}' (known: {})", request.strategy, known_strategies()));
  if (request.strategy == "config" && request.config.empty())
    throw InvalidInput("--strategy config needs --config STRING");
  if (!request.config.empty()) allocator_from_config(request.config);  // a bad string fails here
  if (request.device_capacity > 0 && request.device_capacity < kMiB)
    throw InvalidInput(
        fmt::format("device memory {} is below 1 MiB", format_bytes(request.device_capacity)));
  check_repeat(request.options.repeat);

  ReplayReport report;
  Trace t = read_trace(request.trace, request.read);
  check_repeat(request.options.repeat, match_blocks(t).blocks.size());
  report.trace = t.name;
  report.events = t.events.size();
  report.warnings = t.warnings;
  if (!request.config.empty() && !all && request.strategy != "config")
    report.notes.push_back(fmt::format(
        "--strategy {} and --config: both replayed, the config string as strategy 'config'",
        request.strategy));

  bool needs_static_size = false;
  for (const auto* s : chosen) needs_static_size = needs_static_size || s->name == "static";
  if (needs_static_size) {
    try {
      report.static_pool_bytes =
          advised_static_pool(t, 0.10, request.device_capacity).advised_bytes;
    } catch (const InvalidInput& e) {  // no static pool fits the stated device: the rest runs
      report.notes.push_back(fmt::format("static not replayed: {}", e.what()));
      std::erase_if(chosen, [](const ReplayStrategy* s) { return s->name == "static"; });
    }
  }
  bool has_marks = false;
  for (const TraceEvent& e : t.events) has_marks = has_marks || e.kind == alloc::EventKind::kMark;
  StrategyContext context{t, report.static_pool_bytes, has_marks};
  ReplayOptions options = request.options;
  if (t.snapshot) {
    // A snapshot's blocks lie in its accelerator's memory, simulated here: never touched.
    context.device = [&t, capacity = request.device_capacity] {
      return replay_device(t, capacity);
    };
    report.device = replay_device_text(t, request.device_capacity);
    report.snapshot = t.snapshot;
    options.touch = false;
  } else if (request.device_capacity > 0) {
    report.notes.push_back(
        "--device-memory applies to memory snapshots only: this trace replays on host memory");
  }

  auto run = [&](const std::string& name, alloc::Allocator& allocator) {
    ReplayResult r = replay(t, allocator, options);
    r.strategy = name;
    report.results.push_back(std::move(r));
  };
  for (const auto* s : chosen) run(s->name, *s->make(context));
  if (!request.config.empty())
    run("config",
        *allocator_from_config(request.config, context.device ? context.device() : nullptr));
  report.peak_live = peak_live_bytes(t, match_blocks(t));
  return report;
}

std::string to_text(const ReplayReport& report) {
  std::string out =
      report.snapshot
          ? fmt::format(
                "trace {}: {} events, peak live {} (trace, requested bytes); at the snapshot "
                "PyTorch reserved {} and allocated {} (rounded sizes)\n",
                report.trace, report.events, format_bytes(report.peak_live),
                format_bytes(report.snapshot->reserved()),
                format_bytes(report.snapshot->allocated()))
          : fmt::format("trace {}: {} events, peak live {} (trace)\n", report.trace, report.events,
                        format_bytes(report.peak_live));
  out += fmt::format("{:<20} {:>13} {:>13} {:>8} {:>6} {:>8} {:>10} {:>10} {:>5}\n", "strategy",
                     "reserved MiB", "live MiB", "res/live", "frag", "dev calls", "mean ns",
                     "p99 ns", "OOMs");
  for (const auto& r : report.results)
    out += fmt::format("{:<20} {:>13} {:>13} {:>8.2f} {:>6.2f} {:>8} {:>10.0f} {:>10.0f} {:>5}\n",
                       r.strategy, mib(r.peak_reserved), mib(r.peak_live), r.reserved_per_live(),
                       r.fragmentation_at_peak, r.device_calls, r.mean_ns, r.p99_ns, r.ooms);
  if (!report.device.empty()) out += fmt::format("note: {}\n", report.device);
  for (const auto& n : report.notes) out += fmt::format("note: {}\n", n);
  for (const auto& r : report.results)
    for (const auto& n : r.notes) out += fmt::format("note ({}): {}\n", r.strategy, n);
  return out;
}

nlohmann::json to_json(const ReplayReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : report.results)
    results.push_back({{"strategy", r.strategy},
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
  return results;
}

}  // namespace modelmem::trace

// `modelmem trace IN -o OUT`: converts a trace to the modelmem CSV, the Perfetto / Chrome
// trace-event JSON, or one step as a planning problem (MiniMalloc CSV, for `modelmem solve`).
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/export.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::tools {
namespace {

struct TraceArgs {
  std::string input;
  std::string output;
  std::string format;
  int step = -1;
  std::string window;
  bool live_in = false;
};

trace::Window choose_window(const trace::Trace& t, const TraceArgs& args) {
  if (!args.window.empty()) {
    auto colon = args.window.find(':');
    if (colon == std::string::npos)
      throw InvalidInput(
          fmt::format("--window '{}': expected BEGIN:END event indices", args.window));
    try {
      return {std::stoul(args.window.substr(0, colon)), std::stoul(args.window.substr(colon + 1))};
    } catch (const std::exception&) {
      throw InvalidInput(
          fmt::format("--window '{}': expected BEGIN:END event indices", args.window));
    }
  }
  auto steps = trace::marked_steps(t);
  if (args.step >= 0) {
    if (static_cast<std::size_t>(args.step) >= steps.size())
      throw InvalidInput(fmt::format("{}: --step {} but the trace has {} marked steps", t.name,
                                     args.step, steps.size()));
    return steps[static_cast<std::size_t>(args.step)];
  }
  return {0, t.events.size()};
}

void setup(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Convert a trace: modelmem CSV, Perfetto JSON, or a step as a planning problem");
  cmd->add_option("trace", args->input, "trace CSV")->required();
  cmd->add_option("-o,--output", args->output, "output file")->required();
  cmd->add_option("--format", args->format,
                  "csv, perfetto or problem (default: from the extension, .json = perfetto)")
      ->check(CLI::IsMember({"csv", "perfetto", "problem"}));
  cmd->add_option("--step", args->step, "problem: the marked step to convert (0-based)");
  cmd->add_option("--window", args->window, "problem: event indices BEGIN:END instead of a step");
  cmd->add_flag("--live-in", args->live_in,
                "problem: include blocks allocated before the window and live in it");
  cmd->callback([args, &exit_code] {
    trace::Trace t = trace::read_trace(args->input);
    for (const auto& w : t.warnings) fmt::print(stderr, "warning: {}\n", w);
    std::string format = args->format;
    if (format.empty()) format = args->output.ends_with(".json") ? "perfetto" : "csv";
    if (format == "csv") {
      trace::write_csv(t, args->output);
    } else {
      std::ofstream out(args->output, std::ios::binary | std::ios::trunc);
      if (!out) throw InvalidInput(fmt::format("{}: cannot write", args->output));
      if (format == "perfetto") {
        trace::write_perfetto_json(t, out);
      } else {
        trace::ProblemOptions options;
        options.include_live_in = args->live_in;
        plan::Problem p = trace::to_problem(t, choose_window(t, *args), options);
        out << "id,lower,upper,size\n";
        for (const plan::Buffer& b : p.buffers)
          out << b.id << ',' << b.start << ',' << b.end << ',' << b.size << '\n';
      }
      out.flush();
      if (!out) throw Error(fmt::format("{}: write failed", args->output));
    }
    fmt::print("wrote {} ({}, {} events)\n", args->output, format, t.events.size());
    exit_code = 0;
  });
}

CommandRegistration reg(45, &setup);

}  // namespace
}  // namespace modelmem::tools

// `modelmem trace IN -o OUT`: converts a trace to the modelmem CSV, the Perfetto / Chrome
// trace-event JSON, or one step as a planning problem (MiniMalloc CSV, for `modelmem solve`).
// Parses its flags, checks the output path, calls trace::convert_trace, then writes the file.
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/trace/export.hpp"
#include "modelmem/trace/trace.hpp"
#include "paths.hpp"

namespace modelmem::tools {
namespace {

struct TraceArgs {
  trace::ConvertRequest request;
  int step = -1;
  std::string window;
};

trace::Window parse_window(const std::string& text) {
  auto colon = text.find(':');
  std::size_t begin = 0, end = 0, used = 0;
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    begin = std::stoul(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument("junk");
    end = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) throw std::invalid_argument("junk");
  } catch (const std::exception&) {
    throw InvalidInput(fmt::format("--window '{}': expected BEGIN:END event indices", text));
  }
  if (begin > end) throw InvalidInput(fmt::format("--window '{}': BEGIN is after END", text));
  return {begin, end};
}

void setup_trace(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Convert a trace: modelmem CSV, Perfetto JSON, or a step as a planning problem");
  cmd->add_option("trace", args->request.inputs,
                  "trace CSV; several (T.csv T.*.csv of one `run --trace`) are read as one")
      ->required();
  cmd->add_option("-o,--output", args->request.output, "output file")->required();
  cmd->add_option("--format", args->request.format,
                  "csv, perfetto or problem (default: from the extension: .csv = csv, "
                  ".json = perfetto; any other extension needs --format)")
      ->check(CLI::IsMember({"csv", "perfetto", "problem"}));
  cmd->add_option("--step", args->step,
                  "problem: the step to convert (0-based), as `analyze` lists them: from the "
                  "marks, else from the repeating period")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--window", args->window, "problem: event indices BEGIN:END instead of a step");
  cmd->add_flag("--live-in", args->request.live_in,
                "problem: include blocks allocated before the window and live in it");
  cmd->add_flag("--skip-bad", args->request.read.skip_bad,
                "skip malformed trace lines (counted in a warning) instead of stopping");
  cmd->callback([args, &exit_code] {
    trace::ConvertRequest& request = args->request;
    if (args->step >= 0) request.step = static_cast<std::size_t>(args->step);
    if (!args->window.empty()) request.window = parse_window(args->window);
    trace::conversion_format(request);  // a bad format or option fails before any work
    check_output_file(request.output);
    trace::Conversion c = trace::convert_trace(request);
    core::write_file_replacing(request.output, c.text);  // never through a symlink
    for (const auto& w : c.warnings) fmt::print(stderr, "warning: {}\n", w);
    if (c.window)
      fmt::print("wrote {} (problem, {} buffers from events [{}, {}) of {})\n", request.output,
                 c.buffers, c.window->begin, c.window->end, c.events);
    else
      fmt::print("wrote {} ({}, {} events)\n", request.output, c.format, c.events);
    exit_code = 0;
  });
}

CommandRegistration trace_registration(45, &setup_trace);

}  // namespace
}  // namespace modelmem::tools

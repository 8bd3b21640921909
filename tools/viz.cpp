// `modelmem viz TRACE -o trace.html`: a self-contained page to explore a trace in a browser.
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/viz.hpp"

namespace modelmem::tools {
namespace {

struct VizArgs {
  std::string trace;
  std::string output = "trace.html";
  std::size_t max_blocks = 200000;
};

void setup(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<VizArgs>();
  CLI::App* cmd = app.add_subcommand(
      "viz",
      "Write a self-contained HTML page: memory over time per pool, blocks in address x time");
  cmd->add_option("trace", args->trace, "trace CSV")->required();
  cmd->add_option("-o,--output", args->output, "HTML file to write (default trace.html)");
  cmd->add_option("--max-blocks", args->max_blocks, "draw at most this many (largest) blocks")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, &exit_code] {
    trace::Trace t = trace::read_trace(args->trace);
    for (const auto& w : t.warnings) fmt::print(stderr, "warning: {}\n", w);
    std::ofstream out(args->output, std::ios::binary | std::ios::trunc);
    if (!out) throw InvalidInput(fmt::format("{}: cannot write", args->output));
    trace::VizOptions options;
    options.max_blocks = args->max_blocks;
    trace::write_viz_html(t, out, options);
    out.flush();
    if (!out) throw Error(fmt::format("{}: write failed", args->output));
    fmt::print("wrote {} ({} events)\n", args->output, t.events.size());
    exit_code = 0;
  });
}

CommandRegistration reg(55, &setup);

}  // namespace
}  // namespace modelmem::tools

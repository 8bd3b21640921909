// `modelmem viz TRACE -o trace.html`: a self-contained page to explore a trace in a browser.
// Parses its flags, checks the output path, calls trace::make_viz, then writes the page.
#include <fmt/format.h>

#include <fstream>
#include <string>

#include "command.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/trace/viz.hpp"
#include "paths.hpp"

namespace modelmem::tools {
namespace {

struct VizArgs {
  std::string trace;
  std::string output = "trace.html";
  trace::ReadOptions read;
  trace::VizOptions options;
};

void setup_viz(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<VizArgs>();
  CLI::App* cmd = app.add_subcommand(
      "viz",
      "Write a self-contained HTML page: memory over time per pool, blocks in address x time");
  cmd->add_option("trace", args->trace, "trace CSV")->required();
  cmd->add_option("-o,--output", args->output, "HTML file to write (default trace.html)");
  cmd->add_option("--max-blocks", args->options.max_blocks,
                  "draw at most this many (largest) blocks")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--skip-bad", args->read.skip_bad,
                "skip malformed trace lines (counted in a warning) instead of stopping");
  cmd->callback([args, &exit_code] {
    if (!args->output.ends_with(".html") && !args->output.ends_with(".htm"))
      throw InvalidInput(fmt::format("{}: the page is HTML: name the file .html", args->output));
    check_output_file(args->output);
    trace::VizPage page = trace::make_viz(args->trace, args->read, args->options);
    core::write_file_replacing(args->output, page.html);  // never through a symlink
    for (const auto& w : page.warnings) fmt::print(stderr, "warning: {}\n", w);
    fmt::print("wrote {} ({} events)\n", args->output, page.events);
    exit_code = 0;
  });
}

CommandRegistration viz_registration(55, &setup_viz);

}  // namespace
}  // namespace modelmem::tools

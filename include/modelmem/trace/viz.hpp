// `modelmem viz`: a self-contained HTML page (no network, data inline) showing memory over time
// per pool and every block in address x time; zoom with the wheel, pan by dragging, hover for
// size and times. Address gaps between distant regions are compressed so blocks stay visible.
#pragma once

#include <cstddef>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

struct VizOptions {
  /// Blocks drawn at most (the largest are kept when there are more); series are never cut.
  std::size_t max_blocks = 200000;
};

void write_viz_html(const Trace& trace, std::ostream& out, const VizOptions& options = {});

/// `modelmem viz TRACE`: the page of a trace file, rendered in memory (the caller writes it).
struct VizPage {
  std::string html;
  std::size_t events = 0;
  std::vector<std::string> warnings;  ///< what reading the trace skipped or found odd
};
VizPage make_viz(const std::filesystem::path& trace, const ReadOptions& read = {},
                 const VizOptions& options = {});

}  // namespace modelmem::trace

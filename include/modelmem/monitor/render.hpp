// What `modelmem info` and `modelmem top` print for a look at the machine (monitor/view.hpp),
// so that the command line and the Python package (modelmem.info_report) print the same.
// Part of modelmem::modelmem (JSON and fmt), not of the std-only modelmem::core.
#pragma once

#include <string>
#include <vector>

#include "modelmem/monitor/view.hpp"

namespace modelmem::monitor {

/// `modelmem info`: host and device lines, a table of every pool, the command lines, the
/// planned arenas' hits and misses, and the fallback warnings.
std::string info_table(const MachineView& view);
/// `modelmem info --json`: one JSON object (host, devices, processes with their pools, stale
/// segments, npu, notes), indented by 2, with a final newline.
std::string info_json(const MachineView& view);
/// `modelmem info --format prometheus`: the text exposition format, version 0.0.4.
std::string info_prometheus(const MachineView& view);
/// One of the three by name: "table", "json" or "prometheus" (InvalidInput for another).
std::string info_report(const MachineView& view, const std::string& format);

/// What one frame of `modelmem top` shows.
struct TopFrame {
  std::string sort = "reserved";  ///< a field of pool_sort_fields()
  double interval_s = 1;          ///< the refresh interval, shown in the title
  int height = 1000;              ///< lines at most (the terminal's rows)
  int width = 1000;               ///< columns at most
  bool ansi = false;              ///< end each line with "clear to end of line"
};

/// One frame of `modelmem top`: the title, host and device lines, then `rows` sorted by
/// `frame.sort`, as many as fit.
std::string top_frame(const MachineView& view, std::vector<PoolRow> rows, const TopFrame& frame);

}  // namespace modelmem::monitor

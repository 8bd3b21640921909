// What the info and top renderings share: the host and device lines, and cutting a column.
#pragma once

#include <string>
#include <vector>

#include "modelmem/monitor/view.hpp"

namespace modelmem::monitor::detail {

/// Cuts `s` to `n` characters, marking the cut with '~'.
std::string cut(const std::string& s, std::size_t n);
/// "host: 24.0G total, 20.1G available, 3.9G used, 1.2M shared memory"
std::string host_line(const MachineView& v);
/// A line per accelerator, then a line per backend that could not answer.
std::vector<std::string> device_lines(const MachineView& v);

}  // namespace modelmem::monitor::detail

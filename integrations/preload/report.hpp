// The exit report and the trace writer, registered with atexit by initialise().
#pragma once

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

/// MODELMEM_REPORT=1: the report on stderr.
void print_report();
/// MODELMEM_TRACE=path: writes the recorded trace as CSV.
void write_trace();

}  // namespace modelmem::preload

#pragma GCC visibility pop

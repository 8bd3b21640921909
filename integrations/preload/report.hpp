// The exit report, registered with atexit by initialise().
#pragma once

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

/// MODELMEM_REPORT=1: the report on stderr.
void print_report();

}  // namespace modelmem::preload

#pragma GCC visibility pop

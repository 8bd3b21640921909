// The Analysis result shared by Trace.analyze() and MemoryLogger.analyze().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "modelmem/trace/analysis.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::python {

struct PyAnalysis {
  trace::Analysis analysis;
  std::vector<trace::AllocationSite> sites;
};

/// Trace.analyze(): the analysis and the top allocation sites, computed without the GIL.
std::shared_ptr<PyAnalysis> analyze_trace(const trace::Trace& trace, const std::string& solver,
                                          double time_limit);

}  // namespace modelmem::python

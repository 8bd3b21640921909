// Trace exports: Chrome / Perfetto trace-event JSON (opens in ui.perfetto.dev and
// chrome://tracing) and the memory-over-time series the viewer draws. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/plan/problem.hpp"

#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

/// Writes the trace-event JSON: per pool a counter track "pool N" with series `allocated` (live
/// bytes of blocks) and, when the trace has segment/map events, `reserved`; instant events for
/// OOMs and marks; a slice per marked step. Timestamps in microseconds from the first event.
void write_perfetto_json(const Trace& trace, std::ostream& out);

/// Live and reserved bytes of one pool after an event.
struct MemoryPoint {
  std::size_t event = 0;
  std::uint64_t time_ns = 0;
  std::uint32_t pool = 0;
  std::size_t allocated = 0;
  std::size_t reserved = 0;
};

/// One point per alloc/free/segment/map event, in order (the pool's value after the event).
/// `has_reserved` is set when any segment/map event occurred.
std::vector<MemoryPoint> memory_series(const Trace& trace, const Blocks& blocks,
                                       bool* has_reserved = nullptr);

/// `modelmem trace IN -o OUT`: what to convert the trace into.
struct ConvertRequest {
  std::vector<std::string> inputs;  ///< trace CSVs, read as one (read_traces)
  ReadOptions read;                 ///< skip_bad: `--skip-bad`
  std::string format;               ///< csv, perfetto or problem
  std::string output;  ///< the file the caller will write: names the format when none is given
  std::optional<std::size_t> step;  ///< problem: the step (0-based) as analyze lists them
  std::optional<Window> window;     ///< problem: event indices instead of a step
  bool live_in = false;             ///< problem: blocks live into the window become buffers
};

struct Conversion {
  std::string format;            ///< the format written
  std::size_t events = 0;        ///< events read
  std::string text;              ///< the file's content, complete
  std::optional<Window> window;  ///< problem: the events converted
  std::size_t buffers = 0;       ///< problem: the blocks written as buffers
  std::vector<std::string> warnings;
};

/// The format a request asks for: `format` when given (csv, perfetto or problem), else from the
/// output's extension (.csv -> csv, .json -> perfetto). Throws InvalidInput for an unknown format
/// or extension, or --step/--window/--live-in without the problem format.
std::string conversion_format(const ConvertRequest& request);

/// Reads the trace and renders the whole output in memory (nothing is written: the caller writes
/// `text` once it has it). Throws InvalidInput for a bad request, file, step or window.
Conversion convert_trace(const ConvertRequest& request);

/// One step as a MiniMalloc problem CSV (`id,lower,upper,size`), what `--format problem` writes.
void write_problem_csv(const plan::Problem& problem, std::ostream& out);

}  // namespace modelmem::trace

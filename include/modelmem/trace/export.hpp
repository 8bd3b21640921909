// Trace exports: Chrome / Perfetto trace-event JSON (opens in ui.perfetto.dev and
// chrome://tracing) and the memory-over-time series the viewer draws. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

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

}  // namespace modelmem::trace

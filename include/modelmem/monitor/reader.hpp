// Reading every process's published pools (what `modelmem info` and `modelmem top` show), with
// the validation a reader owes itself: it opens segments read-only, skips a segment it cannot
// trust (wrong magic, version or size, another user's, truncated, torn mid-write) with a note,
// and recognises the segments of processes that died so it can remove them. Never throws for a
// bad segment; a scan costs one directory listing plus one small read per segment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/monitor/segment.hpp"

namespace modelmem::monitor {

struct ScanOptions {
  std::optional<std::int64_t> pid;     ///< only this process
  bool clean_stale = true;             ///< remove segments of dead processes (ours only)
  std::string directory = "/dev/shm";  ///< where POSIX shared memory lives (Linux)
  /// Names read: "" = segment_prefix() (this process's namespace, MODELMEM_MONITOR_NAMESPACE).
  std::string prefix;
  /// How long to wait for a write in progress. A write takes microseconds; only a writer
  /// descheduled half-way (a loaded machine) takes longer, and then a short wait would skip a
  /// live process as torn.
  unsigned max_wait_us = 250000;
};

/// A segment left by a process that is gone (or whose pid now names another process).
struct StaleSegment {
  std::string segment;
  std::int64_t pid = 0;
  std::string process_name;
  std::string why;       ///< "process is gone", "pid reused", ...
  bool removed = false;  ///< the scan removed it
};

struct Scan {
  std::vector<ProcessSnapshot> processes;  ///< live processes, by pid
  std::vector<StaleSegment> stale;
  std::vector<std::string> notes;  ///< one line per skipped segment or failed removal
};

Scan scan(const ScanOptions& options = {});

/// Reads one segment file (opened read-only, never blocking on odd files). `note` says why
/// nothing was returned.
std::optional<ProcessSnapshot> read_segment_file(const std::string& path, std::string& note,
                                                 unsigned max_wait_us = 250000);

/// The pid a segment file name ends with ("modelmem.alice.1234" -> 1234), when it has one.
std::optional<std::int64_t> pid_from_segment_name(const std::string& name);

}  // namespace modelmem::monitor

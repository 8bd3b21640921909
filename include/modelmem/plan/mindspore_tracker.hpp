// MindSpore's memory tracker files (memory_block.csv) read as a planning problem; trace/ reads
// the same rows as a trace (read_trace detects them).
//
// MindSpore writes them when its tracker is on: MS_ALLOC_CONF="memory_tracker:True" (and
// memory_tracker_path:DIR for another folder than the working directory), one set per rank
// (DIR/rank_N/ in a collective run): memory_block.csv (one row per device memory block its pool
// handed out), task.csv (one row per launched task) and tracker_graph.ir. memory_block.csv as
// MemoryTrackerEnabled::Dump writes it: a header row, then one row per block, every field
// followed by a comma (each line ends in one), nothing quoted. Columns read here, found by name
// (the others are ignored: MindSpore versions add and remove some):
//   start_time_stamp  the tracker's counter at the block's allocation
//   end_time_stamp    the counter at its free; INT64_MAX (9223372036854775807) when the run never
//                     freed it
//   size              bytes
//   device_addr       optional: the address as C++ prints a pointer (0x...; 0 for none)
//   stream_id         optional
//   pool_type         optional: the pool's name; rows of pool CPU (host memory) are skipped
//   type, node_name   optional: the MemType (Weight, WorkSpace, Somas, ...) and the producing
//                     task's node, kept as the block's label
// The counter is not time: each allocation, free and task launch adds one. Rows with
// start_time_stamp and end_time_stamp -1 are tensors SOMAS placed inside a block of its own
// (type InSideSomas), which is listed whole: they are skipped, not counted twice. python_stack
// (a column of newer versions) is written unquoted and may hold commas: a row with more fields
// than the header is read with the extra ones taken as part of python_stack.
//
// Every malformed row throws InvalidInput "FILE:LINE: column 'NAME': what is wrong" (or is
// skipped with that warning when skip_bad); a missing column, binary data or an empty file throw
// naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan {

struct TrackerBlock {
  std::int64_t start = 0;
  std::optional<std::int64_t> end;  ///< none: never freed in the run
  std::size_t size = 0;
  std::optional<std::uintptr_t> address;  ///< none: no device_addr column, or 0
  std::uint64_t stream = 0;
  std::string type;  ///< MemType name ("" when the block was bound to no tensor)
  std::string node;  ///< node_name of the producing task
  std::size_t line = 0;
};

struct TrackerFile {
  std::string name;
  std::vector<TrackerBlock> blocks;   ///< device blocks, in file order
  std::int64_t last_stamp = 0;        ///< the largest time stamp in the file (0 when none)
  std::size_t inside_somas = 0;       ///< rows skipped: placed inside a SOMAS block (-1, -1)
  std::size_t host_rows = 0;          ///< rows skipped: pool CPU
  std::size_t zero_size = 0;          ///< rows skipped: 0 bytes
  std::size_t skipped_lines = 0;      ///< malformed rows skipped (skip_bad)
  std::vector<std::string> warnings;  ///< one line each: what was skipped and why
};

/// True when `text` starts (after blank lines) with a header naming start_time_stamp,
/// end_time_stamp and size: a MindSpore memory_block.csv.
bool is_tracker_blocks(std::string_view text);

/// Reads memory_block.csv text. `first_line` is the line number of the text's first line in its
/// file (for messages); `skip_bad` skips malformed rows with a warning instead of throwing.
TrackerFile parse_tracker_blocks(std::string_view text, const std::string& source,
                                 std::size_t first_line = 1, bool skip_bad = false);

/// One buffer per block: id "L<line>" (its line in the file), live [start_time_stamp,
/// end_time_stamp); a block never freed lives until last_stamp + 1. Throws InvalidInput when the
/// file holds no device block.
Problem tracker_problem(const TrackerFile& file);

}  // namespace modelmem::plan

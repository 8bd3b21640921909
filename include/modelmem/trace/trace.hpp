// A recorded allocation trace in memory: the events, read from and written to the modelmem trace
// CSV (see recorder.hpp for the columns; the shared PyTorch traces' `event,time_ns,address,size,
// thread,label` is the same format with fewer columns), the blocks they describe, step windows,
// and the conversion of a window into a planning Problem. Plain values; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/plan/mindspore_tracker.hpp"
#include "modelmem/plan/problem.hpp"

namespace modelmem::trace {

class Recorder;
struct SnapshotState;

struct TraceEvent {
  alloc::EventKind kind = alloc::EventKind::kAlloc;
  std::uint64_t time_ns = 0;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  alloc::Stream stream = 0;
  std::uint32_t pool = 0;
  std::uint64_t thread = 0;
  std::string label;     ///< marks: step_begin, step_end, or a user annotation
  std::size_t line = 0;  ///< line in the file it was read from (0 when not read from a file)
};

struct Trace {
  std::string name;  ///< file name or what the caller calls it, for messages
  std::vector<TraceEvent> events;
  std::uint64_t dropped = 0;          ///< events the recorder lost to a full ring buffer
  std::size_t skipped_lines = 0;      ///< malformed lines skipped (ReadOptions::skip_bad)
  std::vector<std::string> warnings;  ///< what reading skipped or found odd, one line each
  /// Where the events came from when not a modelmem trace: "mindspore" for MindSpore's memory
  /// tracker (memory_block.csv); empty otherwise.
  std::string format;
  /// For a PyTorch / torch_npu memory snapshot: its pools and PyTorch's own totals at the moment
  /// it was taken (trace/snapshot.hpp); null for other traces.
  std::shared_ptr<const SnapshotState> snapshot;
};

struct ReadOptions {
  /// Skip malformed lines (each with a warning naming file and line, and a count) instead of
  /// throwing InvalidInput at the first one (the default: `--skip-bad` on the command line).
  bool skip_bad = false;
  /// Warnings kept per kind of problem; the rest are counted in one summary line.
  std::size_t max_warnings_per_kind = 5;
};

/// Reads a trace CSV. The header must name at least `event` and `time_ns` (any column order;
/// unknown columns are ignored). A malformed line (unknown event, bad number, missing field,
/// a truncated last line) throws InvalidInput "FILE:LINE: what", or with skip_bad is skipped
/// with a warning and counted in Trace::skipped_lines; events out of time order are kept in
/// file order with a warning. Throws InvalidInput for a missing file, a directory, an
/// unreadable file, or a missing or unusable header. A file that starts like a pickle is read
/// as a PyTorch / torch_npu memory snapshot (read_snapshot, trace/snapshot.hpp); a header naming
/// start_time_stamp, end_time_stamp and size as MindSpore's memory_block.csv (from_tracker).
Trace read_trace(const std::filesystem::path& path, const ReadOptions& options = {});
Trace parse_trace(std::istream& in, const std::string& name, const ReadOptions& options = {});
/// Several traces read as one (the files of one `modelmem run --trace T.csv`: T.csv and one
/// T.<pid>.csv per other process): events merged in time order, the addresses of the second
/// file on tagged with its index above bit 48 so that blocks of different processes never
/// match, dropped counts and warnings added up. One path reads as read_trace.
Trace read_traces(const std::vector<std::filesystem::path>& paths, const ReadOptions& options = {});

/// Writes the modelmem trace CSV (kCsvHeader, then one line per event, then `# dropped=N`
/// when events were dropped). read_trace gives back the same events.
void write_csv(const Trace& trace, std::ostream& out);
void write_csv(const Trace& trace, const std::filesystem::path& path);

/// MindSpore's memory tracker blocks (plan/mindspore_tracker.hpp) as a trace: an alloc at each
/// block's start_time_stamp and a free at its end_time_stamp (none when never freed), in stamp
/// order (frees first at one stamp). The stamps count the tracker's operations, not time: an
/// event's time_ns is its stamp x 1000 (one tick shows as 1 us), said in a warning. Each block
/// keeps its device_addr; a block with none, or at an address a live block still holds, gets
/// one of its own above every recorded address (counted in a warning). The label is the
/// block's node_name, else its type. format = "mindspore".
Trace from_tracker(const plan::TrackerFile& file);

/// Drains a recorder into a Trace (its dropped count included).
Trace from_recorder(Recorder& recorder, std::string name = "recorded");

inline constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();

/// One block: an alloc event and the free that returned it (free_index = kNever when it was
/// never freed). Indices are into Trace::events.
struct Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t alloc_index = 0;
  std::size_t free_index = kNever;
  std::uint32_t pool = 0;
  alloc::Stream stream = 0;
};

/// Blocks of a trace, matched by address. A free of an address with no live block is skipped
/// (counted); an alloc of an address that is still live closes the earlier block there (counted:
/// its free was lost). `block_of_event[i]` is the block an alloc/free event i belongs to, or
/// kNever.
struct Blocks {
  std::vector<Block> blocks;
  std::vector<std::size_t> block_of_event;
  std::size_t unknown_frees = 0;
  std::size_t reused_live_addresses = 0;
  std::size_t first_unknown_free_line = 0;
  std::vector<std::string> warnings;
};
Blocks match_blocks(const Trace& trace);

/// Requested bytes live after each event (blocks as match_blocks pairs them: an alloc at the
/// address of a block whose free was lost closes that block first). One entry per event.
std::vector<std::size_t> live_bytes_after(const Trace& trace, const Blocks& blocks);
/// The largest of live_bytes_after (0 for a trace without allocations).
std::size_t peak_live_bytes(const Trace& trace, const Blocks& blocks);

/// A half-open range of event indices [begin, end).
struct Window {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const noexcept { return end - begin; }
};

/// Steps framed by `step_begin` / `step_end` marks (a begin without end runs to the next begin
/// or the end of the trace). Empty when the trace has no marks.
std::vector<Window> marked_steps(const Trace& trace);

struct ProblemOptions {
  /// Blocks allocated before the window and still live in it become buffers from time 0.
  bool include_live_in = false;
  std::size_t alignment = 1;
};

/// The blocks allocated inside `window` as a planning problem. Time is the index of the
/// alloc/free event inside the window (marks do not count); a block freed inside lives until its
/// free's index (exclusive); one still live at the end of the window ends at the window's last
/// index (so one step of the shared traces gives exactly its NAME.step.csv). Buffer ids are the
/// 0-based order of allocation. Throws InvalidInput when the window lies outside the trace.
plan::Problem to_problem(const Trace& trace, const Blocks& blocks, Window window,
                         const ProblemOptions& options = {});
plan::Problem to_problem(const Trace& trace, Window window, const ProblemOptions& options = {});

}  // namespace modelmem::trace

// A trace file of any format read by its path (trace/trace.hpp: read_trace, read_traces): a
// PyTorch or torch_npu snapshot pickle goes to snapshot.cpp, anything else to the CSV parser of
// trace.cpp (which tells modelmem's CSV from MindSpore's tracker rows); several files are merged
// with their addresses and threads kept apart. The one place that knows every reader, so that
// trace.cpp and snapshot.cpp do not depend on each other.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/trace/snapshot.hpp"
#include "modelmem/trace/trace.hpp"

namespace modelmem::trace {

Trace read_trace(const std::filesystem::path& path, const ReadOptions& options) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status))
    throw InvalidInput(fmt::format("{}: no such trace file", path.string()));
  if (std::filesystem::is_directory(status))
    throw InvalidInput(fmt::format("{}: is a directory, not a trace file", path.string()));
  core::check_input_file(path.string(), "trace");  // a FIFO or a device: refused, never read
  if (is_snapshot_file(path)) return read_snapshot(path, options);
  if (path.extension() == ".pickle" || path.extension() == ".pkl")
    throw InvalidInput(fmt::format(
        "{}: not a pickle of protocol 2-5 (what torch.cuda.memory._dump_snapshot writes)",
        path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidInput(fmt::format("{}: cannot open trace", path.string()));
  return parse_trace(in, path.string(), options);
}

Trace read_traces(const std::vector<std::filesystem::path>& paths, const ReadOptions& options) {
  if (paths.empty()) throw InvalidInput("no trace file given");
  if (paths.size() == 1) return read_trace(paths[0], options);
  if (paths.size() >= (std::size_t{1} << 15))
    throw InvalidInput(fmt::format("{} trace files: at most 32767 at once", paths.size()));
  Trace merged;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    Trace t = read_trace(paths[i], options);
    if (i > 0) {
      for (TraceEvent& e : t.events)
        if (e.address >= (std::uintptr_t{1} << 48))
          throw InvalidInput(
              fmt::format("{}:{}: address {:#x} above 2^48: the traces of several "
                          "processes cannot be told apart",
                          paths[i].string(), e.line, e.address));
        else if (e.address != 0)
          e.address |= static_cast<std::uintptr_t>(i) << 48;
      // Thread ids are small per process: kept apart the same way.
      for (TraceEvent& e : t.events) e.thread += static_cast<std::uint64_t>(i) << 32;
    }
    const std::size_t middle = merged.events.size();
    merged.events.insert(merged.events.end(), std::make_move_iterator(t.events.begin()),
                         std::make_move_iterator(t.events.end()));
    std::inplace_merge(
        merged.events.begin(), merged.events.begin() + middle, merged.events.end(),
        [](const TraceEvent& a, const TraceEvent& b) { return a.time_ns < b.time_ns; });
    if (i == 0) merged.format = t.format;
    if (merged.format != t.format) merged.format.clear();  // a mix: nothing to say of all
    merged.dropped += t.dropped;
    merged.skipped_lines += t.skipped_lines;
    merged.warnings.insert(merged.warnings.end(), t.warnings.begin(), t.warnings.end());
    merged.name += (i == 0 ? "" : ", ") + paths[i].string();
  }
  merged.name += fmt::format(" ({} files)", paths.size());
  return merged;
}

}  // namespace modelmem::trace

// analyze(): runs the chapters in order (see analysis_internal.hpp for where each lives).
#include "modelmem/trace/analysis.hpp"

#include <fmt/format.h>

#include "analysis_internal.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/trace/replay.hpp"

namespace modelmem::trace {

Analysis analyze(const Trace& trace, const AnalyzeOptions& options) {
  if (options.device_capacity > 0 && options.device_capacity < (std::size_t{1} << 20))
    throw InvalidInput(
        fmt::format("device memory {} is below 1 MiB", format_bytes(options.device_capacity)));
  Analysis a;
  a.name = trace.name;
  a.events = trace.events.size();
  a.skipped = trace.warnings;
  a.snapshot = trace.snapshot;
  detail::State state{trace, match_blocks(trace), {}, kNever};
  a.skipped.insert(a.skipped.end(), state.blocks.warnings.begin(), state.blocks.warnings.end());
  detail::summarize(state, a);
  detail::find_steps(state, a, options);
  detail::break_down_reserved(state, a);
  detail::advise(state, a, options);
  if (options.check_advice)
    if (std::string where = replay_device_text(trace, options.device_capacity); !where.empty())
      a.skipped.push_back(where);
  if (options.device_capacity > 0 && !trace.snapshot)
    a.skipped.push_back(
        "--device-memory applies to memory snapshots only: this trace replays on host memory");
  return a;
}

Analysis analyze_file(const std::filesystem::path& path, const ReadOptions& read,
                      const AnalyzeOptions& options) {
  return analyze(read_trace(path, read), options);
}

}  // namespace modelmem::trace

// The chapters of `analyze()` (analysis.cpp runs them in order), one file each:
//   analysis_summary.cpp   counts, sizes, peaks, rates, the best-fit pool simulation
//   analysis_steps.cpp     the repeating step: period, step windows, kinds of step, their plans
//   analysis_reserved.cpp  where reserved-but-unused memory sits when reserved memory peaks
//   analysis_advice.cpp    advice with complete config strings, each checked by a replay
//   analysis_render.cpp    the text and JSON renderers
// A chapter reads what the earlier ones left in Analysis and in the shared State.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "modelmem/trace/analysis.hpp"

namespace modelmem::trace::detail {

/// What chapters pass on beside the Analysis itself.
struct State {
  const Trace& trace;
  Blocks blocks;
  std::vector<std::size_t> live_after;       ///< live bytes after each event
  std::size_t peak_reserved_event = kNever;  ///< first event where reserved bytes peak
};

void summarize(State& state, Analysis& a);
void find_steps(State& state, Analysis& a, const AnalyzeOptions& options);
void break_down_reserved(const State& state, Analysis& a);
void advise(const State& state, Analysis& a, const AnalyzeOptions& options);

/// The trace replayed through the allocator `config` builds (touch off), on replay_device.
AdviceCheck replay_config(const Trace& trace, const std::string& config,
                          std::size_t device_capacity);
/// "strategy:static,static_pool_mb:MIB".
std::string static_config(std::size_t mib);

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline std::size_t ceil_mib(std::size_t bytes) {
  return (bytes + kMiB - 1) / kMiB;
}
/// "12.3%" for 0.123.
std::string percent(double fraction);
/// part / whole, 0 when whole is 0.
inline double ratio(std::size_t part, std::size_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace modelmem::trace::detail

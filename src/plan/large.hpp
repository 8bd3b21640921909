// Internal: the large-instance phase of the `best` solver. A problem is decomposed into parts
// that can be planned independently, exactly (no plan is lost):
//
// - a buffer live over the whole schedule of its group overlaps every other buffer of the group,
//   so some optimal plan puts it at the bottom (move its address range down, shift what was
//   below up by its size): such buffers are stacked at the bottom and taken out;
// - what remains is split at the time points no buffer spans: those parts never share a time
//   step, so they may reuse the same addresses; each is decomposed again.
//
// The leaves are planned on their own (heuristics, then the exact search for the leaves that
// set the arena, while time remains), on several threads, and put back together. Not a public
// header.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::plan::detail {

struct Decomposition {
  /// Buffers stacked at the bottom of their group: fixed offsets (indices into the problem).
  std::vector<std::pair<std::size_t, std::size_t>> fixed;
  struct Leaf {
    std::vector<std::size_t> members;  ///< indices into Problem::buffers
    std::size_t base = 0;              ///< the leaf's plan starts at this address
    std::size_t stacked = 0;  ///< bytes of the buffers stacked below it (base minus padding)
  };
  std::vector<Leaf> leaves;
  /// The stacked bytes may be counted toward a lower bound: every stacked size is a multiple of
  /// every alignment above it, so taking the stacked buffers out loses no aligned plan.
  bool bound_valid = true;
};

/// Decomposes `problem` as described above (at most `max_depth` nested groups; deeper groups
/// stay one leaf). O(n log n) per level.
Decomposition decompose(const Problem& problem, std::size_t max_depth = 64);

/// Runs `task(i)` for i in [0, count) on up to `threads` threads (the caller's among them).
/// Which thread runs which task varies; callers keep results per task, so outcomes do not depend
/// on the thread count.
void parallel_for(std::size_t count, unsigned threads,
                  const std::function<void(std::size_t)>& task);

struct LargeResult {
  Plan plan;
  std::size_t lower_bound = 0;  ///< peak-live, or what the leaves' searches prove when higher
  std::size_t leaves = 0;
  std::size_t distinct = 0;  ///< leaves planned (the others repeat one of them)
  std::size_t searched = 0;  ///< leaves handed to the exact search
};

/// The large-instance phase: plans every leaf with the heuristics, then improves the leaves that
/// set the arena with the exact search until `deadline` (leaves of at most `exact_max` buffers).
/// Empty when the deadline passes before every leaf has a plan.
std::optional<LargeResult> plan_by_parts(const Problem& problem, const Decomposition& parts,
                                         std::chrono::steady_clock::time_point deadline,
                                         unsigned threads, std::size_t exact_max = 4000);

struct PeakWindowResult {
  Plan plan;
  std::size_t window_buffers = 0;  ///< the buffers of the window that gave the plan
};

/// The arena of a training graph is decided on a few steps near its peak, where buffers of very
/// different sizes and lives must tile the bound, and a greedy order that is right there is wrong
/// elsewhere (MindSpore's PanGu-alpha 2.6B: every greedy order leaves 40 MiB at the peak). This
/// plans windows of 1, 2, 4, ... steps on each side of the peak (at most `max_buffers` buffers,
/// lives cut to the window) exactly at `capacity` (the lower bound), then places the whole
/// problem greedily: the window's buffers first, from the bottom of the window's plan up, then
/// the others larger first. Returns the smallest plan so made, if one is below `below`; stops at
/// the first plan at the peak. Each window's exact search may spend half of `work_budget` (the
/// plan does not depend on the machine); everything stops at `deadline`.
std::optional<PeakWindowResult> plan_from_peak_window(
    const Problem& problem, std::size_t capacity, std::size_t below,
    std::chrono::steady_clock::time_point deadline, std::uint64_t work_budget,
    std::size_t max_buffers = 3000);

/// A lower bound from a relaxation solved exactly: the buffers live near the peak, at most
/// `max_buffers` of them, planned by the exact search until `deadline`; what it proves for this
/// subset holds for the whole problem. Returns the peak-live bound when it proves nothing more.
std::size_t window_lower_bound(const Problem& problem,
                               std::chrono::steady_clock::time_point deadline,
                               std::size_t max_buffers = 160);

}  // namespace modelmem::plan::detail

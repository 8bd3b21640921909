// Private helpers shared by the heuristics in src/plan/.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "modelmem/plan/heuristics.hpp"

namespace modelmem::plan::detail {

/// The steady clock's time point after which a placement gives up (Deadline::max(): never).
using Deadline = std::chrono::steady_clock::time_point;

/// Thrown by a placement or heap simulation that passes its `stop_at`: the caller keeps the
/// plans it already has (how `best` keeps its time limit on a million buffers).
struct TimeUp {};

/// How place_in_order finds the placed buffers that overlap a newcomer in time (see
/// buffer_placer.cpp); every choice gives the same plan.
enum class PlacementIndex { kAuto, kScan, kTimeTree };

/// True when the time tree is expected to be faster than the scan for this problem.
bool prefer_time_tree(const Problem& problem);

/// place_in_order, also adding to `work` the number of placed buffers it looked at, so that
/// callers can bound the total effort of trying several orderings.
Plan place_in_order_counted(const Problem& problem, std::span<const std::size_t> order,
                            GapChoice choice, std::size_t& work,
                            PlacementIndex index = PlacementIndex::kAuto);

/// place_in_order_counted for many orders of one problem: the index (and its memory) is built
/// once and reused by every place() call. Not thread-safe; one per thread.
class Placer {
 public:
  explicit Placer(const Problem& problem, PlacementIndex index = PlacementIndex::kAuto);
  ~Placer();
  Placer(const Placer&) = delete;
  Placer& operator=(const Placer&) = delete;
  /// Throws TimeUp once `stop_at` has passed (checked every few thousand buffers).
  Plan place(std::span<const std::size_t> order, GapChoice choice, std::size_t& work,
             Deadline stop_at = Deadline::max());

 private:
  struct Index;
  const Problem& problem_;
  std::unique_ptr<Index> index_;
};

/// Heap simulation: buffers allocated when they start and freed when they end, in schedule
/// order; ties among buffers starting at the same step follow `tie_order` (a permutation giving
/// each buffer's rank). O(n log n) plus the gaps skipped for alignment.
/// Throws TimeUp once `stop_at` has passed, unless `unplaced` is given: then the buffers not
/// yet simulated are placed in linear time above the others, last in, first out (a valid plan,
/// never larger than the naive one), and *unplaced says how many (0: the simulation finished).
/// `by_end` is end_order(problem) when the caller has it (several simulations of one problem share
/// it); empty: computed here.
Plan simulate_heap(const Problem& problem, std::span<const std::size_t> rank, GapChoice choice,
                   Deadline stop_at = Deadline::max(), std::span<const std::size_t> by_end = {},
                   std::size_t* unplaced = nullptr);
/// The buffers' indices sorted by end time.
std::vector<std::size_t> end_order(const Problem& problem);

/// The heuristics with a deadline (steady clock): orderings after the first are tried, and the
/// local search moves made, only before it. No deadline: Clock::time_point::max(). Past
/// `stop_at` even the first ordering gives up: TimeUp.
/// `work_budget` bounds the orderings tried by the greedy placements in buffers looked at (0:
/// the registry's default, about 0.1 s); deterministic, unlike the deadline.
/// `unplaced` (best-fit only): its first heap simulation is not given up at `stop_at` but cut
/// short (simulate_heap's `unplaced`), so a plan always comes back; *unplaced says how many
/// buffers were placed last in, first out rather than simulated (0: none).
Plan heuristic_plan(const std::string& name, const Problem& problem, Deadline deadline,
                    Deadline stop_at = Deadline::max(), std::size_t work_budget = 0,
                    std::size_t* unplaced = nullptr);
/// The names heuristic_plan takes, in the registry's order.
const std::vector<std::string>& heuristic_names();
/// best_heuristic_plan with a deadline.
Plan best_heuristic_plan_until(const Problem& problem, std::size_t search_effort,
                               Deadline deadline);

/// The distinct start and end times of the buffers, sorted: elementary step k is the time
/// range [points[k], points[k+1]).
std::vector<Time> time_points(const Problem& problem);

/// The index of time `t` in `points` (t must be one of them).
inline std::size_t time_index(const std::vector<Time>& points, Time t) {
  return static_cast<std::size_t>(std::lower_bound(points.begin(), points.end(), t) -
                                  points.begin());
}

/// Throws InvalidInput: placing buffer `b` would need an offset beyond 64 bits.
[[noreturn]] void throw_offset_overflow(const Buffer& b);

/// `value` rounded up to a multiple of b.alignment; false when that overflows 64 bits.
inline bool try_align_up(std::size_t value, const Buffer& b, std::size_t& out) {
  if (b.alignment <= 1 || value % b.alignment == 0) {
    out = value;
    return true;
  }
  return !__builtin_add_overflow(value, b.alignment - value % b.alignment, &out);
}

/// As try_align_up, but throws (throw_offset_overflow) on overflow.
inline std::size_t align_up(std::size_t value, const Buffer& b) {
  std::size_t out;
  if (!try_align_up(value, b, out)) throw_offset_overflow(b);
  return out;
}

}  // namespace modelmem::plan::detail

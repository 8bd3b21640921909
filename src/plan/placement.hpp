// Private helpers shared by the heuristics in src/plan/.
#pragma once

#include <cstddef>
#include <span>

#include "modelmem/heuristics.hpp"

namespace modelmem::plan::detail {

/// How place_in_order finds the placed buffers that overlap a newcomer in time (see
/// placement.cpp); every choice gives the same plan.
enum class PlacementIndex { kAuto, kScan, kTimeTree };

/// True when the time tree is expected to be faster than the scan for this problem.
bool prefer_time_tree(const Problem& problem);

/// place_in_order, also adding to `work` the number of placed buffers it looked at, so that
/// callers can bound the total effort of trying several orderings.
Plan place_in_order_counted(const Problem& problem, std::span<const std::size_t> order,
                            GapChoice choice, std::size_t& work,
                            PlacementIndex index = PlacementIndex::kAuto);

/// Heap simulation: buffers allocated when they start and freed when they end, in schedule
/// order; ties among buffers starting at the same step follow `tie_order` (a permutation giving
/// each buffer's rank). O(n log n) plus the gaps skipped for alignment.
Plan simulate_heap(const Problem& problem, std::span<const std::size_t> rank, GapChoice choice);

[[noreturn]] void throw_offset_overflow();

/// Offsets rounded up to an alignment (any positive value), overflow-checked.
inline std::size_t align_up(std::size_t value, std::size_t alignment) {
  if (alignment <= 1) return value;
  std::size_t rem = value % alignment;
  if (rem == 0) return value;
  std::size_t r;
  if (__builtin_add_overflow(value, alignment - rem, &r)) throw_offset_overflow();
  return r;
}

}  // namespace modelmem::plan::detail

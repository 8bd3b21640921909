// Internal: the large-neighbourhood search of the `best` solver (refine.cpp). It improves a
// valid plan by taking out a set of buffers near the top of the arena (the buffers that set the
// arena, and those around them in time and address), keeping every other buffer where it is,
// and placing the set again greedily in another order into the gaps the fixed buffers leave.
// A move is kept when the arena does not grow and fewer buffers (or as many) reach its top.
// Not a public header.
#pragma once

#include <chrono>
#include <cstddef>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan::detail {

struct RefineOptions {
  /// Stops here whatever the budget (steady clock).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /// Independent chains (different random seeds), one per thread; the best plan wins (ties: the
  /// lowest chain), so the result depends on the thread count but not on scheduling.
  unsigned threads = 1;
  /// Work per chain, counted in buffers visited while placing (machine-independent): with the
  /// same budget, problem and threads the plan is the same on every machine that finishes it
  /// before the deadline.
  std::size_t work_budget = 2'000'000'000;
  /// Stops as soon as the arena reaches this (a lower bound).
  std::size_t target = 0;
  /// Searches the global placement order first (half the budget and time); off: the
  /// neighbourhoods only.
  bool orders = true;
};

struct RefineResult {
  Plan plan;                 ///< never larger than the starting plan
  std::size_t moves = 0;     ///< neighbourhoods tried, all chains
  std::size_t improved = 0;  ///< moves that lowered a chain's arena
  bool stopped_on_time = false;
};

/// Runs the search from `start` (which must be a valid plan of `problem`; capacity ignored).
RefineResult refine_plan(const Problem& problem, const Plan& start, const RefineOptions& options);

}  // namespace modelmem::plan::detail

// The greedy planning heuristics behind the solver registry (naive, greedy-size, greedy-breadth,
// best-fit), and the placement primitives they share, public so that other solvers (the exact
// search, ONNX and trace front ends) can reuse them for a quick upper bound.
//
// Every function here is deterministic, thread-compatible (no shared state) and respects buffer
// alignment. They never look at Problem::capacity; the Solver wrappers made by the factories do,
// and return no plan when the arena found exceeds it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::plan {

std::unique_ptr<Solver> make_naive_solver();
std::unique_ptr<Solver> make_greedy_size_solver();
std::unique_ptr<Solver> make_greedy_breadth_solver();
std::unique_ptr<Solver> make_best_fit_solver();

/// Which free gap a greedy placement takes among those large enough.
enum class GapChoice {
  kBest,   ///< the smallest gap that fits (ties: lowest address)
  kFirst,  ///< the lowest gap that fits
};

/// Places the buffers one at a time in `order` (indices into problem.buffers, each exactly
/// once): each goes into a gap among the already placed buffers that overlap it in time, or on
/// top of them when no gap fits. It scans all placed buffers when lifetimes overlap a lot
/// (O(n) per buffer, tiny constant: 10,000 buffers in about 0.1 s) and uses a segment tree over
/// time when they are short (O(k log n) per buffer for k overlapping ones); both give the same
/// plan. Throws InvalidInput if `order` is not a permutation or an offset would overflow.
Plan place_in_order(const Problem& problem, std::span<const std::size_t> order,
                    GapChoice choice = GapChoice::kBest);

/// Runs every heuristic, then a local search over the placement order of the best greedy one
/// (a buffer at the top of the arena moves earlier; kept when the arena does not grow), and
/// returns the plan with the smallest arena (capacity ignored; empty problem: empty plan).
/// `search_effort` bounds the local search by the number of placed buffers its placements look
/// at (deterministic, machine-independent; the default is about 0.1-0.3 s).
inline constexpr std::size_t kDefaultSearchEffort = 15'000'000;
Plan best_heuristic_plan(const Problem& problem, std::size_t search_effort = kDefaultSearchEffort);

}  // namespace modelmem::plan

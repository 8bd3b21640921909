// The exact static planner: a complete branch-and-bound search over canonical ("gravity")
// placements, in the spirit of MiniMalloc (Moffitt, ASPLOS 2023), plus the `best` solver that
// runs the heuristics first and hands the rest of the time to the exact search.
//
// exact, with Problem::capacity: decides whether the buffers fit; returns a plan or proves that
//   none exists (SolveResult::proven_infeasible). Without a capacity: minimises the arena,
//   starting from SolveOptions::initial (or its own skyline greedy) and tightening down toward
//   the lower bound; proven_optimal when the search closes the gap, otherwise the best plan found
//   and the proven lower bound (SolveResult::lower_bound, note). Over 20,000 buffers it returns
//   no plan and says so in the note (its set-up alone would overrun any time limit).
// best: every heuristic of the registry, then exact seeded with the best heuristic plan; over
//   5,000 buffers the large-instance phase (docs/planner.md): heuristics side by side, an exact
//   decomposition into parts, the exact search on the parts that set the arena.
//
// Both are stateless objects: solve() may run concurrently on different problems. Worst-case
// time is exponential; SolveOptions::time_limit bounds it (checked every few thousand nodes).
#pragma once

#include <cstdint>
#include <memory>

#include "modelmem/plan/solver.hpp"

namespace modelmem::plan {

struct ExactOptions {
  /// Split the problem at time points no buffer spans and solve the parts independently.
  bool decompose = true;
  /// Remember states proven to fail (skyline + placed set) and prune them when met again.
  bool memoize = true;
  /// Stop after this many search nodes in total (0: no limit); mostly for tests.
  std::uint64_t node_limit = 0;
};

std::unique_ptr<Solver> make_exact_solver(ExactOptions options = {});
std::unique_ptr<Solver> make_best_solver();

}  // namespace modelmem::plan

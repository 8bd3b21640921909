// Static planning solvers behind one interface, selectable by name. Every solver respects
// alignment and, when Problem::capacity is set, returns only plans within it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan {

struct SolveOptions {
  /// Wall-clock budget for searching solvers (exact, best); heuristics ignore it.
  std::chrono::duration<double> time_limit = std::chrono::seconds(10);
  /// The exact search's budget in work instead of the clock (0: the clock alone). Work is search
  /// nodes weighted by the buffers of the part searched, about proportional to time; when set,
  /// the search and its capacity probes count it, so that the plan is the same on every machine
  /// and at any load; time_limit still stops the search, as a safety net. It applies to what
  /// the exact search plans (`exact`, and `best` up to 5,000 buffers); `best`'s large-instance
  /// phase keeps the clock. exact_work_for turns a time limit into a budget.
  std::uint64_t work_budget = 0;
  /// Called now and then by long searches with the best arena so far (for progress output).
  /// May be empty. Called on the solving thread.
  std::function<void(std::size_t best_arena, double elapsed_seconds)> progress;
  /// An upper bound already known (e.g. from heuristics run earlier); exact search starts there.
  std::optional<Plan> initial;
  /// Threads `best` may use on large problems (the heuristics side by side, then the parts of
  /// the decomposition); 0 counts as 1. The plan does not depend on it when no time limit
  /// cuts a search short: every part is planned the same way whichever thread takes it.
  unsigned threads = 1;
  /// The problem's peak-live bound (plan::lower_bound) when the caller has computed it, so that
  /// `best` does not sweep a large problem twice within its limit; 0: computed when needed.
  std::size_t peak_live_bound = 0;
  /// The caller has checked the problem (check_problem, or the CSV reader, which refuses the
  /// same): `best` and `exact` skip their own check (a tenth of a second per million buffers).
  bool checked = false;
};

struct SolveResult {
  std::optional<Plan> plan;        ///< empty when no plan was found (within the capacity, in time)
  bool proven_optimal = false;     ///< arena is the minimum possible (exact search finished)
  bool proven_infeasible = false;  ///< with a capacity: proven that nothing fits
  std::size_t lower_bound = 0;     ///< best lower bound known to the solver (>= plan::lower_bound)
  double seconds = 0;
  std::string solver;  ///< name of the solver that produced `plan`
  std::string note;    ///< e.g. "time limit reached; gap 1.2%"
};

class Solver {
 public:
  virtual ~Solver() = default;
  virtual std::string name() const = 0;
  /// Throws InvalidInput for a malformed problem (see check_problem).
  virtual SolveResult solve(const Problem& problem, const SolveOptions& options = {}) const = 0;
};

/// A work_budget the exact search spends in about `limit` on an idle core here (4 x 10^7 units
/// a second; measured 4.6 to 6.7 x 10^7): its plan is that of a search of about that length.
std::uint64_t exact_work_for(std::chrono::duration<double> limit);

/// Names accepted by make_solver: naive, greedy-size, greedy-breadth, best-fit, exact, best.
std::vector<std::string> solver_names();
/// Throws InvalidInput naming the unknown solver and listing the known ones.
std::unique_ptr<Solver> make_solver(const std::string& name);

/// Convenience: make_solver(name)->solve(problem, options).
SolveResult solve(const Problem& problem, const std::string& solver = "best",
                  const SolveOptions& options = {});

}  // namespace modelmem::plan

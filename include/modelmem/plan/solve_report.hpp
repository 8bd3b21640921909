// `modelmem solve PROBLEM.csv` as a library call: read a MiniMalloc problem, run one solver or
// all of them, validate every plan, and keep the best; with the renderer of the comparison table
// the command prints (so the command line and the Python package show the same thing). The
// best plan is written with plan_io.hpp (CSV) or plan_json.hpp (JSON). Std-only.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::plan {

struct SolveRequest {
  std::string file;             ///< the problem (MiniMalloc CSV)
  std::string solver = "best";  ///< a solver name, or "all" for every one
  std::optional<std::size_t> capacity;
  /// Per solver, > 0: what follows reading the file and comes before writing the plan (the lower
  /// bound, the solver, validating its plan) is kept within it, the first solver's share paying
  /// for the bound.
  double time_limit_s = 10;
  unsigned threads = 1;  ///< for the large-instance phase of best (SolveOptions::threads)
  /// Progress of a long search: solver name, best arena so far, seconds. May be empty.
  std::function<void(const std::string&, std::size_t, double)> progress;
  /// Called once the header is known and after each solver, for output as it comes. May be empty.
  std::function<void(const std::string& text)> on_text;
};

struct SolveRow {
  std::string name;  ///< the solver asked for (the result's `solver` may name one inside it)
  SolveResult result;
};

struct SolveReport {
  Problem problem;
  std::size_t lower_bound = 0;  ///< the peak-live bound
  /// The strongest lower bound any solver proved (>= lower_bound).
  std::size_t strongest_bound = 0;
  std::vector<SolveRow> rows;
  std::optional<std::size_t> best;  ///< index into rows of the smallest arena, if any plan
  /// The arena of the file's own plan (its `offset` column, when valid), and what was wrong with
  /// it when it was not ("" when fine or absent).
  std::optional<std::size_t> file_plan_arena;
  std::string file_plan_note;
  /// Seconds spent reading and parsing the file: the one part of a run the time limit does not
  /// cover (`read_seconds` in the JSON).
  double read_seconds = 0;
  /// Seconds the caller spent writing the plan file (solve --output), set by it before to_json
  /// (`write_seconds` in the JSON); 0 when none was written. Not covered by the limit either.
  double write_seconds = 0;
  /// "best-fit", or "best (found by greedy-size)" when the solver reports another inside it.
  std::string best_from() const;
  /// (best arena - strongest_bound) / best arena: how much of the plan may still be saved, 0
  /// when optimal or without a plan.
  double gap() const;
};

/// Checks the request (solver name, time limit, the file) before solving; InvalidInput for a
/// bad one. A solver returning an invalid plan is a logic_error (a bug, not bad input).
SolveReport run_solve(const SolveRequest& request);

/// The first line and the table header; one table row; the closing line (both lower bounds, the
/// best arena and the gap left); all together for a whole report.
std::string solve_header_text(const SolveReport& report);
std::string solve_row_text(const SolveRow& row, std::size_t lower_bound);
std::string solve_footer_text(const SolveReport& report);
std::string to_text(const SolveReport& report);
/// The report as one JSON object (`solve --json`): file, buffers, capacity, peak_live_bound,
/// proven_lower_bound, file_plan_arena, read_seconds, write_seconds, best {solver, found_by, arena,
/// gap, optimal} or null, and solvers [{name, found_by, arena, lower_bound, proven_optimal,
/// proven_infeasible, seconds, note}].
std::string to_json(const SolveReport& report);

/// The plan file (plan_json.hpp) of one solver's result, as `solve --output PLAN.json` writes
/// it: the problem's name as source, the result's solver, lower bound and proof, the problem's
/// capacity, and `peak_live_bound` as peak_live_bound_bytes. Python's Plan.to_json() of a
/// solve() writes the same.
std::string plan_file_json(const Problem& problem, const SolveResult& result,
                           std::size_t peak_live_bound);

}  // namespace modelmem::plan

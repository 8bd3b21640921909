// The `modelmem solve` run and its table. Formatting with snprintf: the plan layer is std-only.
#include "modelmem/plan/solve_report.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_io.hpp"

namespace modelmem::plan {

namespace {

std::string printf_string(const char* format, auto... args) {
  char buffer[512];
  int n = std::snprintf(buffer, sizeof buffer, format, args...);
  if (n < 0) return {};
  if (static_cast<std::size_t>(n) < sizeof buffer) return std::string(buffer, n);
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

}  // namespace

std::string SolveReport::best_from() const {
  if (!best) return {};
  const SolveRow& row = rows[*best];
  return row.result.solver == row.name || row.result.solver.empty()
             ? row.name
             : row.name + " (found by " + row.result.solver + ")";
}

std::string solve_header_text(const SolveReport& report) {
  std::string out = printf_string("%s: %zu buffers, lower bound %zu", report.problem.name.c_str(),
                                  report.problem.buffers.size(), report.lower_bound);
  if (report.problem.capacity) out += printf_string(", capacity %zu", *report.problem.capacity);
  out += printf_string("\n\n%-16s %14s %8s %7s %10s  %s\n", "solver", "arena", "/ LB", "proven",
                       "time (s)", "note");
  return out;
}

std::string solve_row_text(const SolveRow& row, std::size_t lb) {
  const SolveResult& r = row.result;
  const std::string arena = r.plan ? std::to_string(r.plan->arena_size) : "-";
  const std::string ratio =
      r.plan && lb > 0 ? printf_string("%.4f", double(r.plan->arena_size) / double(lb)) : "-";
  const char* proven = r.proven_optimal ? "yes" : r.proven_infeasible ? "no fit" : "no";
  return printf_string("%-16s %14s %8s %7s %10.3f  %s\n", row.name.c_str(), arena.c_str(),
                       ratio.c_str(), proven, r.seconds, r.note.c_str());
}

std::string solve_footer_text(const SolveReport& report) {
  if (report.strongest_bound <= report.lower_bound) return {};
  const bool optimal =
      report.best && report.rows[*report.best].result.plan->arena_size == report.strongest_bound;
  return printf_string("\nproven lower bound %zu (%.4f x the peak-live bound %zu)%s\n",
                       report.strongest_bound,
                       double(report.strongest_bound) / double(report.lower_bound),
                       report.lower_bound, optimal ? ": the best plan is optimal" : "");
}

std::string to_text(const SolveReport& report) {
  std::string out = solve_header_text(report);
  for (const SolveRow& row : report.rows) out += solve_row_text(row, report.lower_bound);
  return out + solve_footer_text(report);
}

SolveReport run_solve(const SolveRequest& request) {
  if (!(request.time_limit_s > 0)) throw InvalidInput("--time-limit must be positive");
  std::vector<std::string> names;
  if (request.solver == "all") {
    names = solver_names();
  } else {
    make_solver(request.solver);  // unknown names fail before the file is read
    names.push_back(request.solver);
  }
  SolveReport report;
  report.problem = read_problem_csv(request.file);
  report.problem.capacity = request.capacity;
  report.lower_bound = lower_bound(report.problem);
  report.strongest_bound = report.lower_bound;
  if (request.on_text) request.on_text(solve_header_text(report));
  for (const std::string& name : names) {
    auto solver = make_solver(name);
    SolveOptions options;
    options.time_limit = std::chrono::duration<double>(request.time_limit_s);
    options.threads = request.threads;
    if (request.progress)
      options.progress = [&](std::size_t arena, double elapsed) {
        request.progress(name, arena, elapsed);
      };
    SolveRow row{name, solver->solve(report.problem, options)};
    if (row.result.plan) {
      auto v = validate(report.problem, *row.result.plan);
      if (!v) throw std::logic_error("solver " + name + " returned an invalid plan: " + v.message);
      if (!report.best ||
          row.result.plan->arena_size < report.rows[*report.best].result.plan->arena_size)
        report.best = report.rows.size();
    }
    report.strongest_bound = std::max(report.strongest_bound, row.result.lower_bound);
    if (request.on_text) request.on_text(solve_row_text(row, report.lower_bound));
    report.rows.push_back(std::move(row));
  }
  if (request.on_text) {
    const std::string footer = solve_footer_text(report);
    if (!footer.empty()) request.on_text(footer);
  }
  return report;
}

}  // namespace modelmem::plan

// The `modelmem solve` run and its table. Formatting with snprintf: the plan layer is std-only.
#include "modelmem/plan/solve_report.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/plan_json.hpp"

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
  if (report.file_plan_arena)
    out += printf_string(
        "\nthe file's offset column: a plan of arena %zu%s (the searches start "
        "from it)",
        *report.file_plan_arena,
        report.file_plan_note.empty() ? "" : (", " + report.file_plan_note).c_str());
  else if (!report.file_plan_note.empty())
    out += "\nthe file's offset column: " + report.file_plan_note;
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
  std::string out = printf_string("\nlower bounds: peak-live %zu, proven %zu", report.lower_bound,
                                  report.strongest_bound);
  if (report.strongest_bound > report.lower_bound)
    out += printf_string(" (%.4f x peak-live)",
                         double(report.strongest_bound) / double(report.lower_bound));
  if (!report.best) return out + "; no plan\n";
  const std::size_t arena = report.rows[*report.best].result.plan->arena_size;
  if (arena <= report.strongest_bound)
    return out + printf_string("; best arena %zu: optimal\n", arena);
  return out + printf_string("; best arena %zu, gap %zu bytes (%.2f%% of the arena)\n", arena,
                             arena - report.strongest_bound, 100.0 * report.gap());
}

double SolveReport::gap() const {
  if (!best) return 0;
  const std::size_t arena = rows[*best].result.plan->arena_size;
  return arena > strongest_bound ? double(arena - strongest_bound) / double(arena) : 0.0;
}

std::string to_json(const SolveReport& report) {
  auto number_or_null = [](const std::optional<std::size_t>& v) {
    return v ? std::to_string(*v) : std::string("null");
  };
  std::string out = "{\"file\": " + json_quote(report.problem.name) +
                    ", \"buffers\": " + std::to_string(report.problem.buffers.size()) +
                    ", \"capacity\": " + number_or_null(report.problem.capacity) +
                    ", \"peak_live_bound\": " + std::to_string(report.lower_bound) +
                    ", \"proven_lower_bound\": " + std::to_string(report.strongest_bound) +
                    ", \"file_plan_arena\": " + number_or_null(report.file_plan_arena) +
                    ", \"read_seconds\": " + printf_string("%.3f", report.read_seconds) +
                    ", \"write_seconds\": " + printf_string("%.3f", report.write_seconds);
  if (report.best) {
    const SolveResult& r = report.rows[*report.best].result;
    out += ", \"best\": {\"solver\": " + json_quote(report.rows[*report.best].name) +
           ", \"found_by\": " +
           json_quote(r.solver.empty() ? report.rows[*report.best].name : r.solver) +
           ", \"arena\": " + std::to_string(r.plan->arena_size) +
           ", \"gap\": " + printf_string("%.6f", report.gap()) +
           ", \"optimal\": " + (r.plan->arena_size <= report.strongest_bound ? "true" : "false") +
           "}";
  } else {
    out += ", \"best\": null";
  }
  out += ", \"solvers\": [";
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const SolveRow& row = report.rows[i];
    const SolveResult& r = row.result;
    out += std::string(i ? ", " : "") + "{\"name\": " + json_quote(row.name) +
           ", \"found_by\": " + json_quote(r.solver) +
           ", \"arena\": " + (r.plan ? std::to_string(r.plan->arena_size) : std::string("null")) +
           ", \"lower_bound\": " + std::to_string(r.lower_bound) +
           ", \"proven_optimal\": " + (r.proven_optimal ? "true" : "false") +
           ", \"proven_infeasible\": " + (r.proven_infeasible ? "true" : "false") +
           ", \"seconds\": " + printf_string("%.3f", r.seconds) +
           ", \"note\": " + json_quote(r.note) + "}";
  }
  return out + "]}\n";
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
  using Clock = std::chrono::steady_clock;
  const auto reading = Clock::now();
  PlannedProblem read = read_problem_and_plan_csv(request.file);
  // The time limit counts from here: everything after reading the file (checking the plan of
  // its offset column, the lower bound, each solver, validating its plan, and writing the best
  // one when the caller says it will) is kept within it.
  const auto begun = Clock::now();
  report.read_seconds = std::chrono::duration<double>(begun - reading).count();
  report.problem = std::move(read.problem);
  report.problem.capacity = request.capacity;
  // An `offset` column (IREE's files carry the compiler's placement): a valid plan seeds the
  // searches and is reported; an invalid one is ignored, with the reason.
  std::optional<Plan> file_plan;
  if (!read.plan.offsets.empty()) {
    const Validation v = validate(report.problem, read.plan);
    if (v) {
      report.file_plan_arena = read.plan.arena_size;
      file_plan = std::move(read.plan);
    } else if (const Validation w = validate(report.problem, read.plan, false); w) {
      report.file_plan_arena = read.plan.arena_size;
      report.file_plan_note = "over the capacity";
      file_plan = std::move(read.plan);
    } else {
      report.file_plan_note = "not a valid plan (" + w.message + "): ignored";
    }
  }
  const auto bound_started = Clock::now();
  report.lower_bound = lower_bound(report.problem);
  report.strongest_bound = report.lower_bound;
  // Validating a plan sorts and sweeps like the lower bound and keeps the live buffers in an
  // ordered set: about three times the bound's time (measured at 10^6 buffers), four with the
  // search's structures freed. That much is kept out of each solver's limit. Writing the plan
  // (--output) is not: the limit covers what comes between reading and writing.
  const double bound_seconds = std::chrono::duration<double>(Clock::now() - bound_started).count();
  const double reserve = bound_seconds * 4;
  if (request.on_text) request.on_text(solve_header_text(report));
  bool first = true;
  for (const std::string& name : names) {
    auto solver = make_solver(name);
    SolveOptions options;
    // The first solver's limit also pays for what came before it (the bound, the file's plan).
    const double before = first ? std::chrono::duration<double>(Clock::now() - begun).count() : 0.0;
    first = false;
    options.time_limit = std::chrono::duration<double>(
        std::max(request.time_limit_s - before - reserve, request.time_limit_s * 1e-3));
    options.threads = request.threads;
    options.peak_live_bound = report.lower_bound;
    options.checked = true;  // read_problem_and_plan_csv refuses what check_problem does
    options.initial = file_plan;
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
  if (request.on_text) request.on_text(solve_footer_text(report));
  return report;
}

std::string plan_file_json(const Problem& problem, const SolveResult& result,
                           std::size_t peak_live_bound) {
  if (!result.plan) throw InvalidInput(problem.name + ": no plan to write");
  PlanInfo info;
  info.source = problem.name;
  info.solver = result.solver;
  info.lower_bound = result.lower_bound;
  info.proven_optimal = result.proven_optimal;
  info.capacity = problem.capacity;
  info.extra.emplace_back("peak_live_bound_bytes", std::to_string(peak_live_bound));
  return plan_json_text(problem, *result.plan, info);
}

}  // namespace modelmem::plan

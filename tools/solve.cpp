// `modelmem solve FILE.csv`: reads a MiniMalloc CSV problem, runs one solver or all of them,
// prints a comparison table, and writes the best plan as CSV or JSON. Parses its flags, checks
// the paths, calls plan::run_solve (the table is its renderer's, printed row by row) and writes
// the plan with plan::write_plan_csv / write_plan_json.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "command.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/files.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/solve_report.hpp"
#include "modelmem/plan/solver.hpp"
#include "paths.hpp"

namespace modelmem::tools {
namespace {

struct SolveArgs {
  std::string file;
  std::string solver = "best";
  std::string capacity;
  double time_limit = 10;
  unsigned threads = 1;
  std::string output;
  bool json = false;
};

/// Progress on stderr for long searches, at most ten updates a second, erased when done.
class Progress {
 public:
  explicit Progress(std::string solver) : solver_(std::move(solver)), enabled_(isatty(2)) {}
  ~Progress() { clear(); }
  const std::string& solver() const { return solver_; }
  void clear() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }
  void operator()(std::size_t best, double elapsed) {
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (shown_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, "\r\033[K%s: best arena %zu, %.1f s", solver_.c_str(), best, elapsed);
  }

 private:
  std::string solver_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_;
};

void write_json(const std::string& path, const plan::Problem& problem,
                const plan::SolveResult& result, std::size_t peak_live) {
  // Through a temporary file renamed into place: a symlink at `path` is replaced, not followed.
  core::write_file_replacing(path, plan::plan_file_json(problem, result, peak_live));
}

void write_output(const std::string& path, const plan::Problem& problem,
                  const plan::SolveResult& result, std::size_t peak_live) {
  if (path.ends_with(".json")) {
    write_json(path, problem, result, peak_live);
  } else {
    std::ostringstream out;
    plan::write_plan_csv(out, problem, *result.plan);
    core::write_file_replacing(path, out.str());
  }
}

int run_solve(const SolveArgs& args) {
  if (!args.output.empty() && !args.output.ends_with(".csv") && !args.output.ends_with(".json"))
    throw InvalidInput("--output " + args.output + ": the name must end in .csv or .json");
  if (!(args.time_limit > 0)) throw InvalidInput("--time-limit must be positive");
  check_input_file(args.file, "problem file");
  if (!args.output.empty()) check_output_file(args.output);

  plan::SolveRequest request;
  request.file = args.file;
  request.solver = args.solver;
  request.time_limit_s = args.time_limit;
  request.threads = args.threads;
  if (!args.capacity.empty()) request.capacity = parse_size(args.capacity, "--capacity");
  std::optional<Progress> progress;
  request.progress = [&progress](const std::string& solver, std::size_t best, double elapsed) {
    if (!progress || progress->solver() != solver) progress.emplace(solver);
    (*progress)(best, elapsed);
  };
  request.on_text = [&progress, &args](const std::string& text) {
    if (progress) progress->clear();
    if (args.json) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  };
  plan::SolveReport report = plan::run_solve(request);
  if (progress) progress->clear();
  if (args.json) {
    if (report.best && !args.output.empty()) {
      const auto writing = std::chrono::steady_clock::now();
      write_output(args.output, report.problem, report.rows[*report.best].result,
                   report.lower_bound);
      report.write_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - writing).count();
    }
    std::fputs(plan::to_json(report).c_str(), stdout);
    return report.best ? 0 : 1;
  }
  if (!report.best) {
    std::fprintf(stderr, "modelmem solve: no plan found%s\n",
                 report.problem.capacity ? " within the capacity" : "");
    return 1;
  }
  if (!args.output.empty()) {
    const plan::SolveResult& best = report.rows[*report.best].result;
    write_output(args.output, report.problem, best, report.lower_bound);
    fmt::print("\nwrote the plan of {}, arena {}, to {}\n", report.best_from(),
               best.plan->arena_size, args.output);
  }
  return 0;
}

void setup_solve(CLI::App& app, int& exit_code) {
  static SolveArgs args;
  auto* cmd = app.add_subcommand(
      "solve", "Plan offsets for the buffers of a MiniMalloc CSV file (id,lower,upper,size)");
  cmd->add_option("file", args.file, "problem file (CSV)")->required();
  cmd->add_option("--solver", args.solver,
                  "solver name, or 'all' for a comparison table (names: see below)")
      ->capture_default_str();
  cmd->add_option(
      "--capacity", args.capacity,
      "arena limit (bytes, or a size such as 16GiB or 512MiB); exit code 1 if no plan fits");
  cmd->add_option("--time-limit", args.time_limit,
                  "seconds for each solver: everything between reading the file and writing the "
                  "plan (the lower bound, the search, validating the plan) is kept within it")
      ->capture_default_str();
  cmd->add_option("--threads", args.threads,
                  "threads for the large-instance phase of best (problems over 5,000 buffers)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 256u));
  cmd->add_option("--output,-o", args.output, "write the best plan to PLAN.csv or PLAN.json");
  cmd->add_flag("--json", args.json,
                "print the report as JSON (both lower bounds, the best arena and its gap, every "
                "solver's row) instead of the table");
  std::string names;
  for (const auto& n : plan::solver_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->footer("Solvers: " + names +
              ".\nExit codes: 0 plan found, 1 no plan fits the capacity (or none found in time), "
              "2 bad input or usage.");
  cmd->callback([&exit_code] { exit_code = run_solve(args); });
}

CommandRegistration solve_registration(10, &setup_solve);

}  // namespace
}  // namespace modelmem::tools

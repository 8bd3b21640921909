// Runs solvers on MiniMalloc-format files and prints one markdown table (used by
// bench/planner/run.sh for docs/benchmarks.md). Not a micro-benchmark: every solver runs once
// per file, the way `modelmem solve` runs it, and every plan is validated.
//
//   bench_minimalloc [--capacity BYTES] [--time-limit SECONDS] [--solvers a,b,...] FILE...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/solver.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {

std::string with_commas(std::size_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_minimalloc [--capacity BYTES] [--time-limit SECONDS] "
               "[--solvers a,b,...] FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::optional<std::size_t> capacity;
  double time_limit = 60;
  std::vector<std::string> solvers = solver_names();
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--capacity" && i + 1 < argc) {
      capacity = std::stoull(argv[++i]);
    } else if (a == "--time-limit" && i + 1 < argc) {
      time_limit = std::stod(argv[++i]);
    } else if (a == "--solvers" && i + 1 < argc) {
      solvers = split(argv[++i]);
    } else if (!a.empty() && a[0] == '-') {
      return usage();
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || solvers.empty()) return usage();
  for (const auto& s : solvers) make_solver(s);  // fail early on a wrong name

  std::printf("| instance | buffers | lower bound |");
  for (const auto& s : solvers) std::printf(" %s |", s.c_str());
  std::printf("\n|---|---:|---:|");
  for (std::size_t i = 0; i < solvers.size(); ++i) std::printf("---:|");
  std::printf("\n");

  std::vector<double> total_seconds(solvers.size(), 0);
  std::vector<int> solved(solvers.size(), 0);
  for (const auto& file : files) {
    Problem p = read_problem_csv(file);
    p.capacity = capacity;
    const std::size_t lb = lower_bound(p);
    std::printf("| %s | %zu | %s |", std::filesystem::path(file).stem().stem().c_str(),
                p.buffers.size(), with_commas(lb).c_str());
    std::fflush(stdout);
    for (std::size_t k = 0; k < solvers.size(); ++k) {
      SolveOptions options;
      options.time_limit = std::chrono::duration<double>(time_limit);
      SolveResult r = make_solver(solvers[k])->solve(p, options);
      total_seconds[k] += r.seconds;
      std::string cell;
      if (r.plan) {
        auto v = validate(p, *r.plan);
        if (!v) {
          std::fprintf(stderr, "%s: %s returned an invalid plan: %s\n", file.c_str(),
                       solvers[k].c_str(), v.message.c_str());
          return 1;
        }
        ++solved[k];
        char buf[128];
        std::snprintf(buf, sizeof buf, "%s (%.3f)%s, %.2f s",
                      with_commas(r.plan->arena_size).c_str(),
                      double(r.plan->arena_size) / double(lb ? lb : 1),
                      r.proven_optimal ? " **opt**" : "", r.seconds);
        cell = buf;
      } else {
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s, %.2f s",
                      r.proven_infeasible ? "proven no fit" : "none found", r.seconds);
        cell = buf;
      }
      if (r.lower_bound > lb) cell += ", bound " + with_commas(r.lower_bound);
      std::printf(" %s |", cell.c_str());
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  std::printf("| **all %zu** | | |", files.size());
  for (std::size_t k = 0; k < solvers.size(); ++k)
    std::printf(" %d plans, %.2f s |", solved[k], total_seconds[k]);
  std::printf("\n");
  return 0;
} catch (const InvalidInput& e) {
  std::fprintf(stderr, "bench_minimalloc: %s\n", e.what());
  return 2;
}

// Runs the exact solver on MiniMalloc-style CSV files, single-threaded, one line per file:
//   bench_exact [--capacity BYTES] [--time-limit SECONDS] FILE.csv...
// With --capacity it decides that capacity; without, it minimises the arena. Prints the time,
// arena, and whether the answer is proven (every plan is checked with validate()), then the
// total time.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "modelmem/plan/exact.hpp"
#include "modelmem/plan/plan_io.hpp"

using namespace modelmem::plan;

int main(int argc, char** argv) {
  std::optional<std::size_t> capacity;
  double limit = 60;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--capacity" && i + 1 < argc)
      capacity = std::stoull(argv[++i]);
    else if (a == "--time-limit" && i + 1 < argc)
      limit = std::stod(argv[++i]);
    else
      files.push_back(a);
  }
  double total = 0;
  int solved = 0;
  std::printf("%-16s %8s %10s %10s %9s  %s\n", "instance", "buffers", "lower", "arena", "seconds",
              "result");
  for (const auto& f : files) {
    Problem p = read_problem_csv(f);
    p.capacity = capacity;
    SolveOptions o;
    o.time_limit = std::chrono::duration<double>(limit);
    auto r = make_exact_solver()->solve(p, o);
    std::string res = r.plan ? (r.proven_optimal ? "optimal" : (capacity ? "fits" : r.note))
                             : (r.proven_infeasible ? "infeasible" : r.note);
    if (r.plan) {
      auto v = validate(p, *r.plan);
      if (!v) res += " INVALID: " + v.message;
      ++solved;
    }
    std::string name = f.substr(f.find_last_of('/') + 1);
    std::printf("%-16s %8zu %10zu %10s %9.3f  %s\n", name.c_str(), p.buffers.size(), lower_bound(p),
                r.plan ? std::to_string(r.plan->arena_size).c_str() : "-", r.seconds, res.c_str());
    std::fflush(stdout);
    total += r.seconds;
  }
  std::printf("total %.3f s, %d/%zu with a plan\n", total, solved, files.size());
  return 0;
}

// Each heuristic on 10,000 random buffers (the target: every heuristic under 1 s).
// Two shapes: lifetimes up to a tenth of the schedule ("sparse", ~1,000 buffers live at a time)
// and up to the whole schedule ("dense", ~5,000 live at a time).
#include <benchmark/benchmark.h>

#include "modelmem/problem.hpp"
#include "modelmem/solver.hpp"
#include "plan/random_problem.hpp"

namespace {

using namespace modelmem::plan;

const Problem& problem(bool dense) {
  static const Problem sparse_p = [] {
    RandomProblemShape s;
    s.buffers = 10000;
    return random_problem(s, 42);
  }();
  static const Problem dense_p = [] {
    RandomProblemShape s;
    s.buffers = 10000;
    s.max_lifetime = 10000;
    return random_problem(s, 43);
  }();
  return dense ? dense_p : sparse_p;
}

void run(benchmark::State& state, const char* name, bool dense) {
  const Problem& p = problem(dense);
  auto solver = make_solver(name);
  std::size_t arena = 0;
  for (auto _ : state) {
    SolveResult r = solver->solve(p);
    arena = r.plan->arena_size;
    benchmark::DoNotOptimize(arena);
  }
  state.counters["arena/LB"] = double(arena) / double(lower_bound(p));
}

}  // namespace

#define PLANNER_BENCH(label, name)                                                    \
  BENCHMARK_CAPTURE(run, label##_sparse, name, false)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(run, label##_dense, name, true)->Unit(benchmark::kMillisecond)

PLANNER_BENCH(naive, "naive");
PLANNER_BENCH(greedy_size, "greedy-size");
PLANNER_BENCH(greedy_breadth, "greedy-breadth");
PLANNER_BENCH(best_fit, "best-fit");

BENCHMARK_MAIN();

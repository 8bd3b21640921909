// Each heuristic on 10,000 random buffers (the target: every heuristic under 1 s).
// Two shapes: lifetimes up to a tenth of the schedule ("sparse", ~1,000 buffers live at a time)
// and up to the whole schedule ("dense", ~5,000 live at a time). A third, "trace", has 100,000
// short-lived buffers (up to 50 steps), like a long recorded allocation trace.
#include <benchmark/benchmark.h>

#include "modelmem/plan/problem.hpp"
#include "modelmem/plan/solver.hpp"
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

const Problem& trace_problem() {
  static const Problem p = [] {
    RandomProblemShape s;
    s.buffers = 100000;
    s.max_lifetime = 50;
    return random_problem(s, 44);
  }();
  return p;
}

void run(benchmark::State& state, const char* name, int shape) {
  const Problem& p = shape == 2 ? trace_problem() : problem(shape == 1);
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

#define PLANNER_BENCH(label, name)                                                \
  BENCHMARK_CAPTURE(run, label##_sparse, name, 0)->Unit(benchmark::kMillisecond); \
  BENCHMARK_CAPTURE(run, label##_dense, name, 1)->Unit(benchmark::kMillisecond);  \
  BENCHMARK_CAPTURE(run, label##_trace100k, name, 2)->Unit(benchmark::kMillisecond)

PLANNER_BENCH(naive, "naive");
PLANNER_BENCH(greedy_size, "greedy-size");
PLANNER_BENCH(greedy_breadth, "greedy-breadth");
PLANNER_BENCH(best_fit, "best-fit");

BENCHMARK_MAIN();

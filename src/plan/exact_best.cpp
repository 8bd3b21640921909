// The default solver: every heuristic of the registry (cheap, milliseconds), then the exact
// search seeded with the best heuristic plan for the rest of the time limit.
#include <chrono>

#include "modelmem/plan/exact.hpp"

namespace modelmem::plan {
namespace {

using Clock = std::chrono::steady_clock;

bool is_heuristic(const std::string& name) {
  return name != "exact" && name != "best";
}

class BestSolver final : public Solver {
 public:
  std::string name() const override { return "best"; }

  SolveResult solve(const Problem& problem, const SolveOptions& options) const override {
    check_problem(problem);
    const auto started = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };

    // Heuristics run without the capacity so that their plans can seed the search even when
    // they do not fit.
    Problem open = problem;
    open.capacity.reset();
    std::optional<Plan> seed;
    std::string seed_name;
    auto consider = [&](const Plan& plan, const std::string& name) {
      if (seed && seed->arena_size <= plan.arena_size) return;
      seed.emplace(plan);
      seed_name = name;
    };
    if (options.initial && options.initial->offsets.size() == problem.buffers.size() &&
        validate(open, *options.initial))
      consider(*options.initial, "initial");
    for (const std::string& name : solver_names()) {
      if (!is_heuristic(name)) continue;
      SolveResult h = make_solver(name)->solve(open, options);
      if (h.plan) consider(*h.plan, name);
    }
    const std::size_t bound = lower_bound(problem);

    SolveResult result;
    result.lower_bound = bound;
    if (seed && seed->arena_size == bound) {  // a heuristic reached the bound: nothing to search
      result.plan = seed;
      result.proven_optimal = true;
      result.solver = seed_name;
      if (problem.capacity && bound > *problem.capacity) {
        result.plan.reset();
        result.proven_optimal = false;
        result.proven_infeasible = true;
        result.note = "lower bound " + std::to_string(bound) + " exceeds the capacity";
      }
    } else if (problem.capacity && seed && seed->arena_size <= *problem.capacity) {
      result.plan = seed;  // fits already: a decision needs no search
      result.solver = seed_name;
    } else {
      SolveOptions rest = options;
      rest.time_limit = std::max(options.time_limit - std::chrono::duration<double>(elapsed()),
                                 std::chrono::duration<double>(0));
      rest.initial = seed;
      result = make_exact_solver()->solve(problem, rest);
      result.solver = "exact";
      if (result.plan && seed && !problem.capacity && seed->arena_size <= result.plan->arena_size)
        result.solver = seed_name;  // the search kept the seed: credit the heuristic
    }
    result.seconds = elapsed();
    return result;
  }
};

}  // namespace

std::unique_ptr<Solver> make_best_solver() {
  return std::make_unique<BestSolver>();
}

}  // namespace modelmem::plan

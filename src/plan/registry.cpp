// The solver registry: one table from name to factory. Adding a solver is one line here.
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/exact.hpp"
#include "modelmem/plan/heuristics.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::plan {
namespace {

struct Entry {
  const char* name;
  std::unique_ptr<Solver> (*make)();
};

// In the order `--solver all` lists them: cheapest first.
const Entry kSolvers[] = {
    {"naive", &make_naive_solver},
    {"greedy-size", &make_greedy_size_solver},
    {"greedy-breadth", &make_greedy_breadth_solver},
    {"best-fit", &make_best_fit_solver},
    {"exact", +[] { return make_exact_solver(); }},
    {"best", &make_best_solver},
};

}  // namespace

std::vector<std::string> solver_names() {
  std::vector<std::string> names;
  for (const Entry& e : kSolvers) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Solver> make_solver(const std::string& name) {
  for (const Entry& e : kSolvers)
    if (name == e.name) return e.make();
  std::string known;
  for (const Entry& e : kSolvers) known += std::string(known.empty() ? "" : ", ") + e.name;
  throw InvalidInput("unknown solver '" + name + "' (known: " + known + ")");
}

SolveResult solve(const Problem& problem, const std::string& solver, const SolveOptions& options) {
  return make_solver(solver)->solve(problem, options);
}

}  // namespace modelmem::plan

// Solving a loaded graph's lifetimes under one order and reuse rule (model/solve.hpp).
#include "modelmem/model/solve.hpp"

#include <fmt/format.h>

#include "modelmem/core/error.hpp"

namespace modelmem::model {

SolvedModel solve_model(const Graph& graph, const LifetimeOptions& lifetimes,
                        const std::string& solver, const plan::SolveOptions& options) {
  SolvedModel mp;
  mp.lifetimes = build_lifetimes(graph, lifetimes);
  const plan::Problem& problem = mp.lifetimes.problem;
  mp.lower_bound = plan::lower_bound(problem);
  mp.peak = plan::peak(problem);
  mp.solve = plan::solve(problem, solver, options);
  if (!mp.solve.plan)
    throw Error(
        fmt::format("{}: solver {} found no plan ({})", graph.source, solver, mp.solve.note));
  auto v = plan::validate(problem, *mp.solve.plan);
  if (!v)
    throw Error(
        fmt::format("{}: solver {} returned an invalid plan: {}", graph.source, solver, v.message));
  return mp;
}

}  // namespace modelmem::model

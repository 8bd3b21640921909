// Solving the lifetimes of a loaded graph: the plan of one execution order under one reuse rule
// (LifetimeOptions), validated, with the lower bound and the step where it is reached. The
// building block of plan_model() (modelmem/model/plan_model.hpp), which most callers want.
#pragma once

#include <cstddef>
#include <string>

#include "modelmem/model/graph.hpp"
#include "modelmem/model/lifetimes.hpp"
#include "modelmem/plan/solver.hpp"

namespace modelmem::model {

struct SolvedModel {
  Lifetimes lifetimes;
  plan::SolveResult solve;  ///< solve.plan is set (solve_model throws otherwise)
  std::size_t lower_bound = 0;
  plan::Peak peak;  ///< step and buffers live where the lower bound is reached
};

/// Builds the lifetimes and solves them with `solver`; the plan is validated. Throws
/// InvalidInput for an unknown solver, Error when the solver finds no plan.
SolvedModel solve_model(const Graph& graph, const LifetimeOptions& lifetimes,
                        const std::string& solver = "best", const plan::SolveOptions& options = {});

}  // namespace modelmem::model

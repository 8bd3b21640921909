// Random planning problems for property tests and benchmarks (not part of the public API).
#pragma once

#include <cstdint>

#include "modelmem/plan/problem.hpp"

namespace modelmem::plan {

struct RandomProblemShape {
  std::size_t buffers = 100;
  Time horizon = 0;       ///< schedule length; 0: as many steps as buffers
  Time max_lifetime = 0;  ///< 0: a tenth of the horizon (at least 1)
  std::size_t max_size = 1 << 20;
  bool random_alignment = false;  ///< draw alignments from {1, 8, 64, 256, 4096} instead of 1
};

/// Deterministic for a given (shape, seed): starts uniform over the horizon, lifetimes and
/// sizes uniform in [1, max].
Problem random_problem(const RandomProblemShape& shape, std::uint64_t seed);

}  // namespace modelmem::plan

// Random planning problems for property tests and benchmarks (random_problem.hpp).
#include "plan/random_problem.hpp"

#include <algorithm>
#include <random>
#include <string>

namespace modelmem::plan {

Problem random_problem(const RandomProblemShape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Time horizon = shape.horizon > 0 ? shape.horizon : std::max<Time>(1, shape.buffers);
  const Time max_life =
      shape.max_lifetime > 0 ? shape.max_lifetime : std::max<Time>(1, horizon / 10);
  std::uniform_int_distribution<Time> start(0, horizon - 1), life(1, max_life);
  std::uniform_int_distribution<std::size_t> size(1, std::max<std::size_t>(1, shape.max_size));
  std::uniform_int_distribution<int> align(0, 4);
  constexpr std::size_t kAlignments[] = {1, 8, 64, 256, 4096};
  Problem p;
  p.name = "random-" + std::to_string(seed);
  p.buffers.reserve(shape.buffers);
  for (std::size_t i = 0; i < shape.buffers; ++i) {
    Buffer b;
    b.id = std::to_string(i);
    b.start = start(rng);
    b.end = b.start + life(rng);
    b.size = size(rng);
    if (shape.random_alignment) b.alignment = kAlignments[align(rng)];
    p.buffers.push_back(std::move(b));
  }
  return p;
}

}  // namespace modelmem::plan

// Fuzzes the MiniMalloc CSV reader. Any input must either parse or throw InvalidInput with a
// one-line message; what parses must be a well-formed problem that survives a write/read round
// trip, and small ones must get a valid plan.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/heuristics.hpp"
#include "modelmem/plan/plan_io.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Problem problem;
  try {
    problem = parse_problem_csv(text, "fuzz.csv");
  } catch (const InvalidInput& e) {
    check(std::string_view(e.what()).find('\n') == std::string_view::npos);
    return 0;
  }
  check_problem(problem);  // must not throw: the reader let it through

  // A small search effort keeps each run fast; what matters here is a valid plan.
  Plan plan = best_heuristic_plan(problem, 100'000);
  check(validate(problem, plan).ok);
  check(plan.arena_size >= lower_bound(problem));

  std::ostringstream out;
  write_plan_csv(out, problem, plan);
  PlannedProblem back = parse_plan_csv(out.str(), "roundtrip.csv");
  check(back.problem.buffers.size() == problem.buffers.size());
  for (std::size_t i = 0; i < problem.buffers.size(); ++i) {
    const Buffer &a = problem.buffers[i], &b = back.problem.buffers[i];
    check(a.id == b.id && a.start == b.start && a.end == b.end && a.size == b.size &&
          a.alignment == b.alignment);
  }
  check(back.plan.offsets == plan.offsets && back.plan.arena_size == plan.arena_size);
  return 0;
}

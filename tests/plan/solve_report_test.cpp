// plan::run_solve, the library call behind `modelmem solve`, and its table renderer.
#include "modelmem/plan/solve_report.hpp"

#include <gtest/gtest.h>

#include <string>

#include "modelmem/core/error.hpp"

namespace modelmem::plan {
namespace {

std::string example() {
  return std::string(MODELMEM_SOURCE_DIR) + "/examples/small.csv";
}

TEST(SolveReport, RunsEverySolverAndKeepsTheSmallestArena) {
  SolveRequest request;
  request.file = example();
  request.solver = "all";
  request.time_limit_s = 2;
  std::string streamed;
  request.on_text = [&](const std::string& text) { streamed += text; };
  SolveReport report = run_solve(request);
  EXPECT_EQ(report.problem.buffers.size(), 8u);
  EXPECT_EQ(report.lower_bound, 26624u);
  EXPECT_EQ(report.rows.size(), solver_names().size());
  ASSERT_TRUE(report.best.has_value());
  for (const SolveRow& row : report.rows) {
    if (row.result.plan) {
      EXPECT_LE(report.rows[*report.best].result.plan->arena_size, row.result.plan->arena_size);
    }
  }
  EXPECT_EQ(report.rows[*report.best].result.plan->arena_size, 26624u);
  // What was printed as it came is the whole report's text.
  EXPECT_EQ(streamed, to_text(report));
  EXPECT_NE(streamed.find("8 buffers, lower bound 26624\n\nsolver"), std::string::npos) << streamed;
}

TEST(SolveReport, ACapacityBelowTheBoundFindsNoPlan) {
  SolveRequest request;
  request.file = example();
  request.solver = "greedy-size";
  request.capacity = 26623;
  SolveReport report = run_solve(request);
  EXPECT_FALSE(report.best.has_value());
  EXPECT_NE(to_text(report).find(", capacity 26623"), std::string::npos);
}

TEST(SolveReport, BadRequestsFailBeforeSolving) {
  SolveRequest request;
  request.file = example();
  request.solver = "nope";
  EXPECT_THROW(run_solve(request), InvalidInput);
  request.solver = "naive";
  request.time_limit_s = 0;
  EXPECT_THROW(run_solve(request), InvalidInput);
  request.time_limit_s = 1;
  request.file = "/nonexistent.csv";
  EXPECT_THROW(run_solve(request), InvalidInput);
}

}  // namespace
}  // namespace modelmem::plan

// The neighbourhood search of `best` (plan/refine.hpp) and the hard stop of the heuristics.
#include "plan/refine.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "plan/brute_force.hpp"
#include "plan/buffer_placer.hpp"
#include "plan/random_problem.hpp"

using namespace modelmem::plan;
using Clock = std::chrono::steady_clock;

namespace {

Plan greedy(const Problem& p) {
  return *make_solver("greedy-size")->solve(p).plan;
}

detail::RefineOptions budget(std::size_t work, unsigned threads = 1) {
  detail::RefineOptions o;
  o.work_budget = work;
  o.threads = threads;
  return o;
}

}  // namespace

// Valid, never worse than where it started, never below the bound, on random problems of every
// density and with alignments.
TEST(Refine, ValidAndNeverWorse) {
  int improved = 0;
  for (std::uint64_t seed = 0; seed < 12; ++seed) {
    RandomProblemShape shape;
    shape.buffers = 60 + 40 * (seed % 4);
    shape.max_lifetime = seed % 2 ? 0 : static_cast<Time>(shape.buffers / 2);
    shape.random_alignment = seed % 3 == 0;
    Problem p = random_problem(shape, seed);
    const Plan start = greedy(p);
    auto o = budget(500'000, 1 + seed % 2);
    o.target = lower_bound(p);
    detail::RefineResult r = detail::refine_plan(p, start, o);
    ASSERT_TRUE(validate(p, r.plan)) << validate(p, r.plan).message;
    EXPECT_LE(r.plan.arena_size, start.arena_size);
    EXPECT_GE(r.plan.arena_size, lower_bound(p));
    if (start.arena_size > o.target) {
      EXPECT_GT(r.moves, 0u);
    }
    improved += r.plan.arena_size < start.arena_size;
  }
  EXPECT_GT(improved, 0);  // it does improve on the greedy plan
}

// Small problems: it reaches the optimum the brute force finds, on most of them.
TEST(Refine, ReachesTheOptimumOfSmallProblems) {
  int optimal = 0, trials = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    RandomProblemShape shape;
    shape.buffers = 7;
    shape.horizon = 8;
    shape.max_lifetime = 5;
    shape.max_size = 8;
    Problem p = random_problem(shape, 100 + seed);
    const std::size_t opt = modelmem::plan::testing::brute_force_optimum(p);
    auto o = budget(200'000);
    o.target = opt;
    detail::RefineResult r = detail::refine_plan(p, greedy(p), o);
    ASSERT_TRUE(validate(p, r.plan));
    ASSERT_GE(r.plan.arena_size, opt);
    ++trials;
    optimal += r.plan.arena_size == opt;
  }
  EXPECT_GE(optimal, trials * 3 / 4) << optimal << " of " << trials;
}

// With the same budget and threads, the same plan; the deadline stops it.
TEST(Refine, DeterministicOnItsBudgetAndStopsOnTime) {
  RandomProblemShape shape;
  shape.buffers = 1000;
  Problem p = random_problem(shape, 5);
  const Plan start = greedy(p);
  for (unsigned threads : {1u, 2u}) {
    detail::RefineResult a = detail::refine_plan(p, start, budget(1'000'000, threads));
    detail::RefineResult b = detail::refine_plan(p, start, budget(1'000'000, threads));
    EXPECT_EQ(a.plan.offsets, b.plan.offsets) << threads << " threads";
    EXPECT_EQ(a.moves, b.moves);
    EXPECT_FALSE(a.stopped_on_time);
  }
  auto o = budget(SIZE_MAX);
  o.deadline = Clock::now() + std::chrono::milliseconds(200);
  const auto t0 = Clock::now();
  detail::RefineResult r = detail::refine_plan(p, start, o);
  EXPECT_TRUE(r.stopped_on_time);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
  EXPECT_TRUE(validate(p, r.plan));
  o.deadline = Clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(detail::refine_plan(p, start, o).plan.offsets, start.offsets);
}

// Negative times (MindSpore's -1) plan like shifted ones.
TEST(Refine, NegativeTimes) {
  RandomProblemShape shape;
  shape.buffers = 200;
  Problem p = random_problem(shape, 3);
  for (Buffer& b : p.buffers) {
    b.start -= 150;
    b.end -= 150;
  }
  detail::RefineResult r = detail::refine_plan(p, greedy(p), budget(1'000'000));
  EXPECT_TRUE(validate(p, r.plan));
}

// Past `stop_at` a placement gives up (TimeUp) instead of finishing its first ordering; naive
// never needs to.
TEST(HeuristicStop, PassedStopThrowsTimeUp) {
  RandomProblemShape shape;
  shape.buffers = 6'000;
  Problem p = random_problem(shape, 4);
  const auto past = Clock::now() - std::chrono::seconds(1);
  for (const char* name : {"greedy-size", "greedy-breadth", "best-fit"})
    EXPECT_THROW(detail::heuristic_plan(name, p, past, past), detail::TimeUp) << name;
  EXPECT_TRUE(validate(p, detail::heuristic_plan("naive", p, past, past)));
  // Not passed: the plan of the registry's solver.
  EXPECT_EQ(detail::heuristic_plan("greedy-size", p, Clock::time_point::max(),
                                   Clock::now() + std::chrono::hours(1))
                .offsets,
            greedy(p).offsets);
}

// planned_solve_ms bounds the planning done inside a step mark: a plan that takes longer is
// finished on a worker thread and taken at a later step mark, counted in plans_deferred.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/plan/solver.hpp"
#include "planned_support.hpp"

namespace modelmem::alloc {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One step: eight blocks of 4..32 KiB, each freed before the next two are made.
void run_step(PlannedAllocator& a) {
  a.begin_step();
  std::vector<void*> live;
  for (std::size_t k = 1; k <= 8; ++k) {
    live.push_back(a.allocate(k * 4096));
    if (live.size() == 2) {
      a.deallocate(live.front());
      live.erase(live.begin());
    }
  }
  for (void* p : live) a.deallocate(p);
  a.end_step();
}

TEST(PlannedDeferred, AStepMarkWaitsAtMostTheLimitAndTheRestIsDeferred) {
  auto device = std::make_shared<testing::MmapDevice>();
  PlannedOptions o;
  o.device = device;
  o.fallback = std::make_shared<testing::MallocAllocator>();
  o.solve_time_limit = milliseconds(50);
  // A planner that takes 400 ms: far past the limit.
  o.planner = [](const plan::Problem& p) {
    std::this_thread::sleep_for(milliseconds(400));
    return *plan::solve(p, "best-fit").plan;
  };
  PlannedAllocator a(o);
  run_step(a);  // warm-up
  auto begin = Clock::now();
  run_step(a);  // its end mark asks for the plan
  const auto mark = Clock::now() - begin;
  EXPECT_LT(mark, milliseconds(300)) << "the step mark waited for the whole plan";
  PlannedStats s = a.planned_stats();
  EXPECT_EQ(s.plans_deferred, 1u);
  EXPECT_EQ(s.plans_made, 0u);
  EXPECT_EQ(s.waiting, alloc::PlanWait::kPlanning);
  const std::string why = alloc::describe_no_plan(s);
  EXPECT_NE(why.find("a plan is still being made on the worker thread"), std::string::npos) << why;
  EXPECT_EQ(a.arena_range().second, 0u);
  run_step(a);  // served by the fallback meanwhile; no second plan is started
  EXPECT_EQ(a.planned_stats().plans_deferred, 1u);
  EXPECT_EQ(a.planned_stats().hits, 0u);
  std::this_thread::sleep_for(milliseconds(600));
  run_step(a);  // its first mark takes the plan
  s = a.planned_stats();
  EXPECT_EQ(s.plans_made, 1u);
  EXPECT_GE(s.deferred_ms, 300u);
  EXPECT_GT(a.arena_range().second, 0u);
  const auto hits = s.hits;
  run_step(a);
  EXPECT_EQ(a.planned_stats().hits, hits + 8) << "the deferred plan serves the next step";
}

TEST(PlannedDeferred, APlanWithinTheLimitIsTakenAtItsOwnStepMark) {
  auto device = std::make_shared<testing::MmapDevice>();
  PlannedOptions o;
  o.device = device;
  o.fallback = std::make_shared<testing::MallocAllocator>();
  o.solve_time_limit = milliseconds(2000);
  PlannedAllocator a(o);
  run_step(a);
  run_step(a);
  PlannedStats s = a.planned_stats();
  EXPECT_EQ(s.plans_made, 1u);
  EXPECT_EQ(s.plans_deferred, 0u);
  run_step(a);
  EXPECT_EQ(a.planned_stats().hits, 8u);
}

// defer_plans:false (planned_defer:False, what replays and sizing use): the step mark waits for
// a plan that runs far past the limit, and the very next step is served from it.
TEST(PlannedDeferred, WithoutDeferralTheStepMarkWaitsForItsPlan) {
  auto device = std::make_shared<testing::MmapDevice>();
  PlannedOptions o;
  o.device = device;
  o.fallback = std::make_shared<testing::MallocAllocator>();
  o.solve_time_limit = milliseconds(20);
  o.defer_plans = false;
  o.planner = [](const plan::Problem& p) {
    std::this_thread::sleep_for(milliseconds(200));
    return *plan::solve(p, "best-fit").plan;
  };
  PlannedAllocator a(o);
  run_step(a);
  auto begin = Clock::now();
  run_step(a);
  EXPECT_GE(Clock::now() - begin, milliseconds(200)) << "the step mark did not wait";
  PlannedStats s = a.planned_stats();
  EXPECT_EQ(s.plans_made, 1u);
  EXPECT_EQ(s.plans_deferred, 0u);
  run_step(a);
  EXPECT_EQ(a.planned_stats().hits, 8u);
}

}  // namespace
}  // namespace modelmem::alloc

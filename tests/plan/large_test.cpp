// The large-instance phase of `best`: decomposition, planning by parts, threads, the window
// lower bound, and the heuristics' deadlines.
#include "plan/large.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "modelmem/plan/exact.hpp"
#include "modelmem/plan/heuristics.hpp"
#include "modelmem/plan/plan_io.hpp"
#include "modelmem/plan/solver.hpp"
#include "plan/brute_force.hpp"
#include "plan/buffer_placer.hpp"
#include "plan/random_problem.hpp"

using namespace modelmem::plan;
using Clock = std::chrono::steady_clock;

namespace {

using modelmem::plan::testing::brute_force_optimum;

// A few buffers on a short schedule, some living over all of it, sizes that rarely pack.
Problem tiny(std::mt19937_64& rng, int max_buffers, bool aligned) {
  std::uniform_int_distribution<int> count(2, max_buffers), time(0, 6), len(1, 4), size(1, 6),
      coin(0, 4), align(0, 2);
  Problem p;
  int n = count(rng);
  for (int i = 0; i < n; ++i) {
    Buffer b;
    b.id = "b" + std::to_string(i);
    b.size = static_cast<std::size_t>(size(rng));
    if (coin(rng) == 0) {
      b.start = 0;
      b.end = 10;  // spans the schedule
    } else {
      b.start = time(rng);
      b.end = b.start + len(rng);
    }
    if (aligned) b.alignment = std::size_t{1} << align(rng);
    p.buffers.push_back(b);
  }
  return p;
}

Problem members_of(const Problem& p, const std::vector<std::size_t>& members) {
  Problem q;
  for (std::size_t i : members) q.buffers.push_back(p.buffers[i]);
  return q;
}

// `parts` independent groups of buffers, one after the other in time, plus a few buffers that
// live over the whole schedule: decomposes into `parts` leaves of `per_part` buffers.
Problem stacked_steps(std::size_t parts, std::size_t per_part, std::uint64_t seed) {
  Problem p;
  std::mt19937_64 rng(seed);
  Time t = 1;
  for (std::size_t k = 0; k < parts; ++k) {
    RandomProblemShape shape;
    shape.buffers = per_part;
    shape.max_size = 4096;
    Problem step = random_problem(shape, seed + k);
    Time span = 0;
    for (Buffer b : step.buffers) {
      b.id = "s" + std::to_string(k) + "_" + b.id;
      b.start += t;
      b.end += t;
      span = std::max(span, b.end - t);
      p.buffers.push_back(std::move(b));
    }
    t += span + 1;
  }
  for (int i = 0; i < 5; ++i)
    p.buffers.push_back({"weight" + std::to_string(i), 1000 + rng() % 5000, 0, t + 1});
  return p;
}

}  // namespace

TEST(Decompose, StacksSpanningBuffersAndSplitsInTime) {
  Problem p;
  p.buffers = {{"w", 10, 0, 10}, {"a", 4, 1, 3}, {"b", 4, 2, 4}, {"c", 7, 5, 8}, {"d", 3, 6, 9}};
  detail::Decomposition d = detail::decompose(p);
  ASSERT_EQ(d.fixed.size(), 1u);
  EXPECT_EQ(d.fixed[0], (std::pair<std::size_t, std::size_t>{0, 0}));
  ASSERT_EQ(d.leaves.size(), 2u);  // {a, b} and {c, d}: no buffer spans time 4-5
  EXPECT_EQ(d.leaves[0].members, (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(d.leaves[1].members, (std::vector<std::size_t>{3, 4}));
  for (const auto& leaf : d.leaves) {
    EXPECT_EQ(leaf.base, 10u);
    EXPECT_EQ(leaf.stacked, 10u);
  }
  EXPECT_TRUE(d.bound_valid);
}

TEST(Decompose, PadsTheBaseForAlignmentAndSaysWhenTheBoundDoesNotHold) {
  Problem p;
  p.buffers = {{"w", 10, 0, 10}, {"a", 8, 1, 3, 8}, {"b", 4, 2, 4}};
  detail::Decomposition d = detail::decompose(p);
  ASSERT_EQ(d.leaves.size(), 1u);
  EXPECT_EQ(d.leaves[0].base, 16u);  // 10 rounded up to a's alignment
  EXPECT_FALSE(d.bound_valid);       // 10 is not a multiple of 8
}

// The decomposition loses nothing: the best plan of the parts, put together, is optimal.
TEST(Decompose, PartsPlannedOptimallyGiveTheOptimum) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    Problem p = tiny(rng, 6, false);
    detail::Decomposition d = detail::decompose(p);
    ASSERT_TRUE(d.bound_valid);
    std::size_t arena = 0;
    for (auto [i, offset] : d.fixed) arena = std::max(arena, offset + p.buffers[i].size);
    for (const auto& leaf : d.leaves)
      arena = std::max(arena, leaf.base + brute_force_optimum(members_of(p, leaf.members)));
    ASSERT_EQ(arena, brute_force_optimum(p)) << "trial " << trial;
  }
}

TEST(PlanByParts, ValidPlansAndBoundsNoHigherThanTheOptimum) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    Problem p = tiny(rng, 7, trial % 2 == 1);
    detail::Decomposition d = detail::decompose(p);
    auto r = detail::plan_by_parts(p, d, Clock::now() + std::chrono::seconds(10), 2);
    ASSERT_TRUE(r);
    ASSERT_TRUE(validate(p, r->plan)) << validate(p, r->plan).message;
    const std::size_t opt = brute_force_optimum(p);
    ASSERT_LE(r->lower_bound, opt) << "trial " << trial;
    ASSERT_GE(r->plan.arena_size, opt);
    ASSERT_GE(r->lower_bound, lower_bound(p));  // never below the peak-live bound
    if (trial % 2 == 0) {  // no alignment: tiny leaves solved exactly give the optimum
      ASSERT_EQ(r->plan.arena_size, opt) << "trial " << trial;
    }
  }
}

// Calls f(problem, its optimum, trial) on `trials` tiny random problems, every third aligned.
template <class F>
void each_tiny_problem(std::uint64_t seed, int trials, F&& f) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    const Problem p = tiny(rng, 7, trial % 3 == 0);
    f(p, brute_force_optimum(p), trial);
  }
}

TEST(WindowLowerBound, NeverAboveTheOptimumAndSometimesAboveThePeak) {
  int stronger = 0;
  each_tiny_problem(3, 400, [&](const Problem& p, std::size_t opt, int trial) {
    const std::size_t peak_bound = lower_bound(p);
    for (std::size_t window : {3, 5, 8}) {
      std::size_t b =
          detail::window_lower_bound(p, Clock::now() + std::chrono::seconds(10), window);
      ASSERT_GE(b, peak_bound);
      ASSERT_LE(b, opt) << "trial " << trial << " window " << window;
      if (b > peak_bound) ++stronger;
    }
  });
  EXPECT_GT(stronger, 0);  // it does prove more than the peak on some problems
}

TEST(WindowLowerBound, PastDeadlineGivesThePeakBound) {
  std::mt19937_64 rng(9);
  Problem p = tiny(rng, 7, false);
  EXPECT_EQ(detail::window_lower_bound(p, Clock::now() - std::chrono::seconds(1)), lower_bound(p));
}

TEST(ParallelFor, RunsEveryTaskOnceAndPassesExceptionsOn) {
  for (unsigned threads : {1u, 2u, 5u}) {
    std::vector<std::atomic<int>> seen(100);
    detail::parallel_for(100, threads, [&](std::size_t i) { ++seen[i]; });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
    EXPECT_THROW(detail::parallel_for(10, threads,
                                      [](std::size_t i) {
                                        if (i == 7) throw std::runtime_error("task 7");
                                      }),
                 std::runtime_error);
  }
}

// Over 5,000 buffers `best` takes the large-instance phase: never worse than any heuristic,
// the plan valid, the bound a bound, and the same plan on 1, 2 or 3 threads.
TEST(BestLarge, NeverWorseThanAHeuristicAndTheSameOnAnyThreadCount) {
  Problem p = stacked_steps(60, 100, 21);  // 6,005 buffers
  ASSERT_GT(p.buffers.size(), 5000u);
  std::size_t best_heuristic = SIZE_MAX;
  for (const char* h : {"naive", "greedy-size", "greedy-breadth", "best-fit"})
    best_heuristic = std::min(best_heuristic, make_solver(h)->solve(p).plan->arena_size);
  std::optional<Plan> first;
  for (unsigned threads : {1u, 2u, 3u}) {
    SolveOptions o;
    o.time_limit = std::chrono::seconds(60);
    o.threads = threads;
    SolveResult r = make_best_solver()->solve(p, o);
    ASSERT_TRUE(r.plan);
    ASSERT_TRUE(validate(p, *r.plan)) << validate(p, *r.plan).message;
    EXPECT_LE(r.plan->arena_size, best_heuristic);
    EXPECT_GE(r.lower_bound, lower_bound(p));
    EXPECT_LE(r.lower_bound, r.plan->arena_size);
    EXPECT_LT(r.seconds, 60);
    if (!first)
      first = r.plan;
    else
      EXPECT_EQ(r.plan->offsets, first->offsets) << threads << " threads";
  }
}

TEST(BestLarge, StopsOnTimeWithAPlan) {
  Problem p = stacked_steps(30, 400, 4);  // 12,005 buffers
  // What cannot be cut short: the first ordering of each heuristic (a deadline already passed).
  auto t0 = Clock::now();
  for (const std::string& name : detail::heuristic_names())
    detail::heuristic_plan(name, p, t0 - std::chrono::seconds(1));
  const double floor = std::chrono::duration<double>(Clock::now() - t0).count();
  SolveOptions o;
  o.time_limit = std::chrono::milliseconds(300);
  o.threads = 2;
  SolveResult r = make_best_solver()->solve(p, o);
  ASSERT_TRUE(r.plan);
  EXPECT_TRUE(validate(p, *r.plan));
  // The limit, that first ordering of each heuristic (twice, for a loaded machine), a margin.
  EXPECT_LT(r.seconds, 0.3 + 2 * floor + 1.0) << "uncuttable part " << floor << " s";
}

TEST(HeuristicDeadline, APassedDeadlineStillGivesAValidPlan) {
  RandomProblemShape shape;
  shape.buffers = 2000;
  Problem p = random_problem(shape, 8);
  const auto past = Clock::now() - std::chrono::seconds(1);
  for (const std::string& name : detail::heuristic_names()) {
    Plan plan = detail::heuristic_plan(name, p, past);
    EXPECT_TRUE(validate(p, plan)) << name;
  }
  Plan plan = detail::best_heuristic_plan_until(p, kDefaultSearchEffort, past);
  EXPECT_TRUE(validate(p, plan));
  // Without a deadline: what the registry's solvers give.
  EXPECT_EQ(detail::heuristic_plan("greedy-size", p, Clock::time_point::max()).offsets,
            make_solver("greedy-size")->solve(p).plan->offsets);
}

// Repeated steps are planned once and their plan reused: the arena is that of one step.
TEST(PlanByParts, RepeatedPartsArePlannedOnce) {
  RandomProblemShape shape;
  shape.buffers = 300;
  shape.max_size = 1000;
  Problem step = random_problem(shape, 17);
  Time span = 0;
  for (const Buffer& b : step.buffers) span = std::max(span, b.end);
  Problem p;
  for (int k = 0; k < 8; ++k)
    for (Buffer b : step.buffers) {
      b.id = std::to_string(k) + "_" + b.id;
      b.start += k * (span + 1);
      b.end += k * (span + 1);
      p.buffers.push_back(std::move(b));
    }
  auto deadline = Clock::now() + std::chrono::seconds(20);
  auto one = detail::plan_by_parts(step, detail::decompose(step), deadline, 1);
  auto all = detail::plan_by_parts(p, detail::decompose(p), deadline, 2);
  ASSERT_TRUE(one && all);
  ASSERT_TRUE(validate(p, all->plan)) << validate(p, all->plan).message;
  EXPECT_EQ(all->leaves, 8 * one->leaves);
  EXPECT_EQ(all->distinct, one->distinct);
  EXPECT_EQ(all->plan.arena_size, one->plan.arena_size);
  EXPECT_EQ(all->lower_bound, one->lower_bound);
}

TEST(ExactLarge, SaysItIsTooLargeInsteadOfOverrunning) {
  Problem p = stacked_steps(70, 300, 6);  // 21,005 buffers
  SolveOptions o;
  o.time_limit = std::chrono::seconds(1);
  auto t0 = Clock::now();
  SolveResult r = make_exact_solver()->solve(p, o);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.note.find("too large for the exact search (21005 buffers"), std::string::npos)
      << r.note;
  EXPECT_EQ(r.lower_bound, lower_bound(p));
}

// A limit too short for any heuristic but naive: best still returns a real plan on time,
// best-fit's first heap simulation cut short at the limit (the buffers it did not reach placed
// last in, first out above the others), and says so; never naive's stack.
TEST(BestLarge, ALimitTooShortCutsBestFitShortOnTime) {
  Problem p = stacked_steps(30, 400, 4);  // 12,005 buffers
  SolveOptions o;
  o.time_limit = std::chrono::nanoseconds(1);
  SolveResult r = make_best_solver()->solve(p, o);
  ASSERT_TRUE(r.plan);
  ASSERT_TRUE(validate(p, *r.plan));
  const std::size_t naive = make_solver("naive")->solve(p).plan->arena_size;
  const std::size_t heap = detail::heuristic_plan("best-fit", p, Clock::now()).arena_size;
  EXPECT_LT(r.plan->arena_size, naive);
  EXPECT_GE(r.plan->arena_size, heap);
  EXPECT_EQ(r.solver, "best-fit");
  // The clock is read every 4,096 buffers: the first 4,095 are simulated, the rest not.
  EXPECT_NE(r.note.find("7910 of 12005 buffers placed last in"), std::string::npos) << r.note;
}

// The heap simulation cut short at `stop_at`: what it reached is simulated, the rest placed last
// in, first out above it, the plan valid and never above the naive arena; without `unplaced` it
// gives up.
TEST(HeapSimulation, CutShortStacksTheRestValidly) {
  Problem p = stacked_steps(30, 400, 4);
  const std::size_t n = p.buffers.size();
  std::vector<std::size_t> rank(n);
  for (std::size_t i = 0; i < n; ++i) rank[i] = i;
  const auto past = Clock::now() - std::chrono::seconds(1);
  std::size_t unplaced = 99;
  Plan cut = detail::simulate_heap(p, rank, GapChoice::kBest, past, {}, &unplaced);
  EXPECT_EQ(unplaced, n - 4095);
  ASSERT_TRUE(validate(p, cut)) << validate(p, cut).message;
  EXPECT_LT(cut.arena_size, make_solver("naive")->solve(p).plan->arena_size);
  Plan full =
      detail::simulate_heap(p, rank, GapChoice::kBest, Clock::time_point::max(), {}, &unplaced);
  EXPECT_EQ(unplaced, 0u);
  EXPECT_LE(full.arena_size, cut.arena_size);
  EXPECT_THROW(detail::simulate_heap(p, rank, GapChoice::kBest, past), detail::TimeUp);
  // Random lifetimes: the buffers past the cut end in any order, not last in, first out.
  for (std::uint64_t seed : {1, 2, 3}) {
    RandomProblemShape shape;
    shape.buffers = 6000;
    shape.random_alignment = seed == 3;
    Problem q = random_problem(shape, seed);
    std::vector<std::size_t> r(q.buffers.size());
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = i;
    Plan plan = detail::simulate_heap(q, r, GapChoice::kFirst, past, {}, &unplaced);
    EXPECT_EQ(unplaced, q.buffers.size() - 4095);
    EXPECT_TRUE(validate(q, plan)) << "seed " << seed << ": " << validate(q, plan).message;
  }
}

constexpr std::uint64_t kWork = 400'000'000;  // about 10 s of the exact search

TEST(PeakWindow, PlansAreValidAndNeverBelowTheOptimum) {
  int found = 0;
  each_tiny_problem(5, 300, [&](const Problem& p, std::size_t opt, int trial) {
    auto r = detail::plan_from_peak_window(p, lower_bound(p), ~std::size_t{0},
                                           Clock::now() + std::chrono::seconds(10), kWork);
    if (!r) return;
    ++found;
    ASSERT_TRUE(validate(p, r->plan, false)) << "trial " << trial;
    EXPECT_GE(r->plan.arena_size, opt);
    EXPECT_GT(r->window_buffers, 0u);
  });
  EXPECT_GT(found, 0);
}

TEST(PeakWindow, ReturnsOnlyPlansBelowWhatItIsGivenAndStopsAtTheDeadline) {
  std::mt19937_64 rng(11);
  Problem p = tiny(rng, 7, false);
  const std::size_t bound = lower_bound(p);
  EXPECT_FALSE(detail::plan_from_peak_window(p, bound, bound,
                                             Clock::now() + std::chrono::seconds(10), kWork));
  EXPECT_FALSE(detail::plan_from_peak_window(p, bound, ~std::size_t{0},
                                             Clock::now() - std::chrono::seconds(1), kWork));
  // A capacity below the peak: nothing to plan at it.
  if (bound > 1)
    EXPECT_FALSE(detail::plan_from_peak_window(p, bound - 1, ~std::size_t{0},
                                               Clock::now() + std::chrono::seconds(10), kWork));
}

// MindSpore's PanGu-alpha 2.6B training graph (../shared/data/dsa), cut to the 1,319 buffers
// live in steps [4500, 5500) around its peak: every greedy order leaves 40 MiB free at the peak
// step (1.0076 x the bound); the window planned exactly and its order carried over closes it.
TEST(PeakWindow, ClosesTheGreedyGapOfPanGuAtItsPeak) {
  const char* path = MODELMEM_SHARED_DATA "/dsa/somas_pangu_2.6B.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not here";
  Problem whole = read_problem_csv(path);
  Problem p;
  for (Buffer b : whole.buffers)
    if (b.start < 5500 && b.end > 4500) {
      b.start = std::max<Time>(b.start, 4500);
      b.end = std::min<Time>(b.end, 5500);
      p.buffers.push_back(std::move(b));
    }
  ASSERT_EQ(p.buffers.size(), 1319u);
  const std::size_t bound = lower_bound(p);
  const SolveResult greedy = make_solver("greedy-size")->solve(p, {});
  ASSERT_TRUE(greedy.plan);
  ASSERT_GT(greedy.plan->arena_size, bound + bound / 200);  // 0.76 % above
  auto r = detail::plan_from_peak_window(p, bound, greedy.plan->arena_size,
                                         Clock::now() + std::chrono::seconds(60), kWork);
  ASSERT_TRUE(r);
  EXPECT_TRUE(validate(p, r->plan, false));
  EXPECT_EQ(r->plan.arena_size, bound);
  // And through `best`, which says so: with a work budget (the same plan at any load; the
  // clock alone fell short under the sanitizers on a loaded machine), the clock a safety net.
  SolveOptions options;
  options.time_limit = std::chrono::seconds(300);
  options.work_budget = kWork;
  const SolveResult best = make_solver("best")->solve(p, options);
  ASSERT_TRUE(best.plan);
  EXPECT_EQ(best.plan->arena_size, bound);
  EXPECT_NE(best.note.find("around the peak planned exactly"), std::string::npos) << best.note;
}

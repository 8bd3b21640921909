#include "modelmem/plan/heuristics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "modelmem/core/error.hpp"
#include "modelmem/plan/solver.hpp"
#include "plan/buffer_placer.hpp"
#include "plan/random_problem.hpp"

using namespace modelmem;
using namespace modelmem::plan;

namespace {

const std::vector<std::string> kHeuristics = {"naive", "greedy-size", "greedy-breadth", "best-fit"};

// Sanitizer builds (Debug, ASan + UBSan) run about 50 times slower: fewer random cases there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kRandomProblems = 400;
#else
constexpr std::uint64_t kRandomProblems = 2000;
#endif

std::size_t aligned_sum(const Problem& p) {
  std::size_t top = 0;
  for (const Buffer& b : p.buffers) top = checked_align_up(top, b.alignment, "t") + b.size;
  return top;
}

}  // namespace

TEST(Registry, ListsTheHeuristicsAndRejectsUnknownNames) {
  auto names = solver_names();
  for (const auto& h : kHeuristics)
    EXPECT_NE(std::find(names.begin(), names.end(), h), names.end()) << h;
  for (const auto& n : names) EXPECT_EQ(make_solver(n)->name(), n);
  try {
    make_solver("greedy");
    FAIL() << "no exception";
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown solver 'greedy'"), std::string::npos) << m;
    EXPECT_NE(m.find("greedy-size"), std::string::npos) << m;
  }
}

TEST(Heuristics, EmptyProblemHasEmptyOptimalPlan) {
  for (const auto& h : kHeuristics) {
    SolveResult r = make_solver(h)->solve(Problem{});
    ASSERT_TRUE(r.plan) << h;
    EXPECT_EQ(r.plan->arena_size, 0u);
    EXPECT_TRUE(r.proven_optimal);
  }
}

TEST(Heuristics, RejectMalformedProblems) {
  Problem p;
  p.buffers = {{"a", 0, 0, 4}};
  for (const auto& h : kHeuristics) EXPECT_THROW(make_solver(h)->solve(p), InvalidInput) << h;
}

TEST(Heuristics, ReuseMemoryOfBuffersThatDoNotOverlap) {
  Problem p;
  // A chain: each buffer lives while the next starts; any two non-neighbours never meet.
  for (int i = 0; i < 6; ++i) p.buffers.push_back({"t" + std::to_string(i), 100, i, i + 2});
  for (const auto& h : {"greedy-size", "greedy-breadth", "best-fit"}) {
    SolveResult r = make_solver(h)->solve(p);
    ASSERT_TRUE(r.plan);
    EXPECT_EQ(r.plan->arena_size, 200u) << h;
    EXPECT_TRUE(r.proven_optimal) << h;
  }
  EXPECT_EQ(make_solver("naive")->solve(p).plan->arena_size, 600u);
}

TEST(Heuristics, PlaceInOrderTakesTheSmallestOrTheLowestGap) {
  // Short-lived pads make two holes among the long-lived buffers while 'small' lives:
  // [100, 300) of 200 bytes and [400, 450) of 50.
  Problem fixed;
  fixed.buffers = {{"base", 100, 0, 10}, {"mid", 100, 0, 10}, {"top", 50, 0, 10},
                   {"pad1", 200, 0, 1},  {"pad2", 50, 0, 1},  {"small", 50, 2, 4}};
  // Placement in this order: base 0, pad1 100, mid 300, pad2 400, top 450, then 'small' must
  // take [400,450) (best fit, 50 bytes) rather than [100,300) (first fit).
  std::vector<std::size_t> seq = {0, 3, 1, 4, 2, 5};
  Plan best = place_in_order(fixed, seq, GapChoice::kBest);
  EXPECT_EQ(best.offsets[3], 100u);
  EXPECT_EQ(best.offsets[1], 300u);
  EXPECT_EQ(best.offsets[4], 400u);
  EXPECT_EQ(best.offsets[2], 450u);
  EXPECT_EQ(best.offsets[5], 400u);
  Plan first = place_in_order(fixed, seq, GapChoice::kFirst);
  EXPECT_EQ(first.offsets[5], 100u);
  EXPECT_TRUE(validate(fixed, best));
  EXPECT_TRUE(validate(fixed, first));
}

TEST(Heuristics, PlaceInOrderRejectsNonPermutations) {
  Problem p;
  p.buffers = {{"a", 1, 0, 1}, {"b", 1, 0, 1}};
  std::vector<std::size_t> dup = {0, 0}, short_order = {1}, out_of_range = {0, 2};
  EXPECT_THROW(place_in_order(p, dup), InvalidInput);
  EXPECT_THROW(place_in_order(p, short_order), InvalidInput);
  EXPECT_THROW(place_in_order(p, out_of_range), InvalidInput);
}

TEST(Heuristics, RespectAlignment) {
  Problem p;
  p.buffers = {{"a", 3, 0, 10, 1}, {"b", 5, 0, 10, 64}, {"c", 7, 0, 10, 4096}};
  for (const auto& h : kHeuristics) {
    SolveResult r = make_solver(h)->solve(p);
    ASSERT_TRUE(r.plan) << h;
    auto v = validate(p, *r.plan);
    EXPECT_TRUE(v) << h << ": " << v.message;
  }
}

TEST(Heuristics, CapacityBelowLowerBoundIsProvenInfeasible) {
  Problem p;
  p.buffers = {{"a", 60, 0, 2}, {"b", 60, 1, 3}};
  p.capacity = 119;
  for (const auto& h : kHeuristics) {
    SolveResult r = make_solver(h)->solve(p);
    EXPECT_FALSE(r.plan) << h;
    EXPECT_TRUE(r.proven_infeasible) << h;
    EXPECT_EQ(r.lower_bound, 120u);
  }
  p.capacity = 120;
  for (const auto& h : kHeuristics) {
    SolveResult r = make_solver(h)->solve(p);
    ASSERT_TRUE(r.plan) << h;
    EXPECT_EQ(r.plan->arena_size, 120u);
  }
}

TEST(Heuristics, NoPlanWhenTheArenaFoundExceedsTheCapacity) {
  Problem p;
  p.buffers = {{"a", 60, 0, 2}, {"b", 60, 2, 4}};
  p.capacity = 100;  // reuse fits (60), no reuse (120) does not
  SolveResult naive = make_solver("naive")->solve(p);
  EXPECT_FALSE(naive.plan);
  EXPECT_FALSE(naive.proven_infeasible);
  EXPECT_NE(naive.note.find("exceeds capacity 100"), std::string::npos) << naive.note;
  EXPECT_EQ(make_solver("greedy-size")->solve(p).plan->arena_size, 60u);
}

// Property test: thousands of random problems, every heuristic's plan is valid, never below the
// lower bound, within the capacity when one is set, and proven optimal only at the lower bound.
TEST(HeuristicsProperty, RandomProblemsGiveValidPlans) {
  std::size_t checked = 0;
  for (std::uint64_t seed = 0; seed < kRandomProblems; ++seed) {
    RandomProblemShape shape;
    shape.buffers = 1 + seed % 20;
    shape.horizon = 1 + static_cast<Time>(seed % 23);
    shape.max_lifetime = 1 + static_cast<Time>(seed % 7);
    shape.max_size = seed % 3 == 0 ? 8 : 1000;
    shape.random_alignment = seed % 2 == 1;
    Problem p = random_problem(shape, seed);
    const std::size_t lb = lower_bound(p);
    if (seed % 5 == 0) p.capacity = lb + seed % 3 * lb / 4;
    for (const auto& h : kHeuristics) {
      SolveResult r = make_solver(h)->solve(p);
      EXPECT_EQ(r.lower_bound, lb);
      if (!r.plan) {
        ASSERT_TRUE(p.capacity) << h << " seed " << seed << " found no plan without a capacity";
        EXPECT_FALSE(r.note.empty());
        continue;
      }
      auto v = validate(p, *r.plan);
      ASSERT_TRUE(v) << h << " seed " << seed << ": " << v.message;
      ASSERT_GE(r.plan->arena_size, lb) << h << " seed " << seed;
      ASSERT_EQ(r.proven_optimal, r.plan->arena_size == lb) << h << " seed " << seed;
      if (h == "naive") {
        EXPECT_EQ(r.plan->arena_size, aligned_sum(p));
      } else if (!shape.random_alignment) {
        EXPECT_LE(r.plan->arena_size, aligned_sum(p)) << h << " seed " << seed;
      }
      ++checked;
    }
    if (seed % 4 == 0) {
      Plan best = best_heuristic_plan(p, 200'000);
      auto v = validate(Problem{p.buffers, std::nullopt, p.name}, best);
      ASSERT_TRUE(v) << "best_heuristic_plan seed " << seed << ": " << v.message;
      ASSERT_GE(best.arena_size, lb);
    }
  }
  EXPECT_GT(checked, kRandomProblems * 3);
}

TEST(HeuristicsProperty, LargerProblemsStayValid) {
  for (std::uint64_t seed = 0; seed < 2; ++seed) {
    RandomProblemShape shape;
    shape.buffers = kRandomProblems / 5;
    shape.random_alignment = seed % 2 == 0;
    Problem p = random_problem(shape, 1000 + seed);
    Plan best = best_heuristic_plan(p, 2'000'000);
    ASSERT_TRUE(validate(p, best)) << validate(p, best).message;
    for (const auto& h : kHeuristics) {
      SolveResult r = make_solver(h)->solve(p);
      ASSERT_TRUE(r.plan);
      auto v = validate(p, *r.plan);
      ASSERT_TRUE(v) << h << ": " << v.message;
      if (h != "naive") {
        EXPECT_LE(best.arena_size, r.plan->arena_size) << h;
      }
    }
  }
}

// The two indexes behind place_in_order (a scan of all placed buffers, a segment tree over
// time) must see the same overlapping buffers in the same order, hence give the same plan.
TEST(HeuristicsProperty, ScanAndTimeTreePlaceIdentically) {
  for (std::uint64_t seed = 0; seed < kRandomProblems / 10; ++seed) {
    RandomProblemShape shape;
    shape.buffers = 1 + seed * 7 % 150;
    shape.horizon = 1 + static_cast<Time>(seed * 13 % 500);
    shape.max_lifetime = 1 + static_cast<Time>(seed % 3 == 0 ? shape.horizon : seed % 40);
    shape.max_size = seed % 4 == 0 ? 16 : 5000;
    shape.random_alignment = seed % 2 == 1;
    Problem p = random_problem(shape, 7000 + seed);
    std::vector<std::size_t> order(p.buffers.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    for (GapChoice choice : {GapChoice::kBest, GapChoice::kFirst}) {
      std::size_t work = 0;
      Plan scan =
          detail::place_in_order_counted(p, order, choice, work, detail::PlacementIndex::kScan);
      Plan tree =
          detail::place_in_order_counted(p, order, choice, work, detail::PlacementIndex::kTimeTree);
      ASSERT_EQ(scan.offsets, tree.offsets) << "seed " << seed;
      ASSERT_EQ(scan.arena_size, tree.arena_size);
      ASSERT_TRUE(validate(p, tree)) << validate(p, tree).message;
    }
  }
}

TEST(Heuristics, TimeTreeIsChosenForShortLifetimesOnly) {
  RandomProblemShape sparse;
  sparse.buffers = 5000;
  sparse.horizon = 100000;
  sparse.max_lifetime = 20;
  EXPECT_TRUE(detail::prefer_time_tree(random_problem(sparse, 1)));
  RandomProblemShape dense = sparse;
  dense.max_lifetime = 100000;
  EXPECT_FALSE(detail::prefer_time_tree(random_problem(dense, 1)));
}

TEST(Heuristics, OffsetsBeyond64BitsAreReportedNotWrapped) {
  // Each buffer must start at a multiple of 2^62 and all three overlap: the third would need
  // offset 2^63 + 2^62 + ..., beyond the address space once the fourth comes.
  Problem p;
  const std::size_t big = std::size_t{1} << 62;
  for (int i = 0; i < 5; ++i) p.buffers.push_back({"b" + std::to_string(i), 8, 0, 10, big});
  for (const auto& h : kHeuristics) {
    try {
      make_solver(h)->solve(p);
      FAIL() << h << ": no exception";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("would overflow 64 bits"), std::string::npos)
          << h << ": " << e.what();
    }
  }
}

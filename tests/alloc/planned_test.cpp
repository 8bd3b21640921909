#include <atomic>
#include <random>
#include <thread>

#include "planned_support.hpp"

namespace modelmem::testing {
namespace {

using alloc::PlannedAllocator;
using alloc::PlannedOptions;

struct Fixture {
  std::shared_ptr<MmapDevice> device = std::make_shared<MmapDevice>();
  std::shared_ptr<MallocAllocator> fallback = std::make_shared<MallocAllocator>();

  PlannedOptions options() const {
    PlannedOptions o;
    o.device = device;
    o.fallback = fallback;
    o.solver = "best-fit";
    return o;
  }
};

// Replays steps (each framed by begin/end marks unless `marks` is false), checking patterns and
// overlaps after every operation when `check` is set. Blocks still live at the end are freed.
void replay(PlannedAllocator& a, const std::vector<std::vector<TraceEvent>>& steps,
            PatternChecker& checker, bool marks = true, bool check = true,
            std::size_t check_every = 1) {
  std::size_t ops = 0;
  for (const auto& step : steps) {
    if (marks) a.begin_step();
    for (const auto& e : step) {
      if (e.kind == TraceEvent::kAlloc) {
        void* p = a.allocate(e.size);
        ASSERT_NE(p, nullptr);
        checker.on_alloc(e.id, p, e.size);
      } else if (e.kind == TraceEvent::kFree) {
        if (!checker.live(e.id)) continue;
        a.deallocate(checker.ptr(e.id));
        checker.on_free(e.id);
      }
      if (check && ++ops % check_every == 0) checker.check_all();
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (marks) a.end_step();
  }
}

void free_all(PlannedAllocator& a, PatternChecker& checker) {
  for (auto id : checker.live_ids()) {
    a.deallocate(checker.ptr(id));
    checker.on_free(id);
  }
}

// Renumbers block ids so a step can be replayed again with fresh ids.
std::vector<TraceEvent> renumber(const std::vector<TraceEvent>& step, std::size_t& next) {
  std::unordered_map<std::size_t, std::size_t> map;
  std::vector<TraceEvent> out;
  for (auto e : step) {
    if (e.kind == TraceEvent::kAlloc) {
      map[e.id] = next++;
      e.id = map[e.id];
    } else if (e.kind == TraceEvent::kFree) {
      auto it = map.find(e.id);
      if (it == map.end()) continue;  // freed a block of an earlier step: drop
      e.id = it->second;
    }
    out.push_back(e);
  }
  return out;
}

std::size_t allocs_in(const std::vector<TraceEvent>& step) {
  return static_cast<std::size_t>(std::count_if(
      step.begin(), step.end(), [](const auto& e) { return e.kind == TraceEvent::kAlloc; }));
}

std::size_t freed_within(const std::vector<TraceEvent>& step) {
  std::set<std::size_t> allocated;
  std::size_t n = 0;
  for (const auto& e : step) {
    if (e.kind == TraceEvent::kAlloc) allocated.insert(e.id);
    if (e.kind == TraceEvent::kFree && allocated.count(e.id)) n++;
  }
  return n;
}

TEST(PlannedArena, RejectsBadOptions) {
  Fixture f;
  PlannedOptions o = f.options();
  o.fallback = nullptr;
  EXPECT_THROW(PlannedAllocator{o}, InvalidInput);
  o = f.options();
  o.device = nullptr;
  EXPECT_THROW(PlannedAllocator{o}, InvalidInput);
  o = f.options();
  o.alignment = 48;
  EXPECT_THROW(PlannedAllocator{o}, InvalidInput);
  o = f.options();
  o.solver = "no-such-solver";
  EXPECT_THROW(PlannedAllocator{o}, InvalidInput);
}

TEST(PlannedArena, RejectsZeroSizeUnknownPointerAndDoubleFree) {
  Fixture f;
  PlannedAllocator a(f.options());
  EXPECT_THROW(a.allocate(0), InvalidInput);
  int x = 0;
  EXPECT_THROW(a.deallocate(&x), InvalidInput);
  void* p = a.allocate(1000);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), InvalidInput);
  EXPECT_EQ(f.fallback->live(), 0u);
}

TEST(PlannedArena, ResNetTraceHitsEveryPlannedSlotAfterWarmup) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50")));
  ASSERT_EQ(steps.size(), 4u);
  PatternChecker checker;
  {
    PlannedOptions o = f.options();
    o.solver = "best";
    PlannedAllocator a(o);
    replay(a, steps, checker);
    auto s = a.planned_stats();
    EXPECT_EQ(s.steps, 4u);
    EXPECT_EQ(s.plans_made, 1u);
    EXPECT_EQ(s.misses, 0u);
    EXPECT_EQ(s.mismatched_steps, 0u);
    // Steps 3 and 4 are served from the plan of step 2: every block freed within its step hits.
    EXPECT_EQ(s.hits, freed_within(steps[2]) + freed_within(steps[3]));
    EXPECT_GE(s.hits, 2u * 260u);
    // The exact solver reaches the peak live bytes of a step (11,763,840 B, see the traces'
    // README): the arena is that, rounded up to a page.
    EXPECT_EQ(s.arena_size, (11763840u + 4095u) / 4096u * 4096u);
    EXPECT_EQ(s.arena_allocations, 1u);
    free_all(a, checker);
  }
  EXPECT_EQ(f.device->outstanding(), 0u);
  EXPECT_EQ(f.fallback->live(), 0u);
}

TEST(PlannedArena, BertTraceHits) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_bert")));
  PatternChecker checker;
  PlannedAllocator a(f.options());
  replay(a, steps, checker);
  auto s = a.planned_stats();
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.hits, freed_within(steps[2]) + freed_within(steps[3]));
  EXPECT_GT(s.hits, 800u);
  free_all(a, checker);
}

TEST(PlannedArena, VariableBatchGetsOnePlanPerShape) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50_varbatch")));  // 1,4,2,1,4
  ASSERT_EQ(steps.size(), 5u);
  std::size_t next = 1u << 20;
  // Then batch 2, 1, 4 again: all three shapes have plans by then.
  steps.push_back(renumber(steps[2], next));
  steps.push_back(renumber(steps[3], next));
  steps.push_back(renumber(steps[4], next));
  PatternChecker checker;
  PlannedOptions o = f.options();
  o.mismatch_limit = 1;
  PlannedAllocator a(o);
  replay(a, steps, checker, true, true, 16);
  auto s = a.planned_stats();
  EXPECT_EQ(s.plans_kept, 3u);
  EXPECT_EQ(s.replans, 2u);  // batch 2 and batch 1 mismatched the batch-4 plan
  // The last three steps are all hits.
  a.begin_step();
  a.end_step();
  std::size_t last3 = freed_within(steps[5]) + freed_within(steps[6]) + freed_within(steps[7]);
  EXPECT_GE(s.hits, last3 + freed_within(steps[4]));
  free_all(a, checker);
}

TEST(PlannedArena, PlanLimitDropsLeastRecentlyUsed) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_bert_varlen")));  // seq 32,128,64,32,128,64
  PatternChecker checker;
  PlannedOptions o = f.options();
  o.mismatch_limit = 1;
  o.max_plans = 1;
  PlannedAllocator a(o);
  replay(a, steps, checker);
  auto s = a.planned_stats();
  EXPECT_EQ(s.plans_kept, 1u);
  EXPECT_GE(s.plans_made, 4u);  // every new length re-plans, as only one plan is kept
  EXPECT_GT(s.misses, 0u);
  free_all(a, checker);
}

// One marked step: every size allocated, then every block freed.
void marked_step(PlannedAllocator& a, const std::vector<std::size_t>& sizes) {
  a.begin_step();
  std::vector<void*> ps;
  for (auto s : sizes) ps.push_back(a.allocate(s));
  for (auto p : ps) a.deallocate(p);
  a.end_step();
}

// A plan installed in an arena that holds it already leaves the fallback's cache alone: the
// steps the plan does not serve (a serving loop's prefill between its decode steps) keep their
// cached blocks, where trimming at every re-plan made each prefill map and fault them again. A
// plan that needs a larger arena still trims first, so the two never peak together.
TEST(PlannedArena, AReplanThatFitsTheArenaKeepsTheFallbacksCache) {
  Fixture f;
  PlannedOptions o = f.options();
  o.mismatch_limit = 2;
  PlannedAllocator a(o);
  auto step = [&](const std::vector<std::size_t>& sizes) { marked_step(a, sizes); };
  const std::vector<std::size_t> large = {5 << 16, 1 << 16, 7 << 16, 1 << 16},
                                 small = {1 << 16, 3 << 16, 1 << 16};
  for (int i = 0; i < 3; ++i) step(large);
  ASSERT_EQ(a.planned_stats().plans_made, 1u);
  EXPECT_EQ(f.fallback->trims(), 1u);  // the first arena is taken
  for (int i = 0; i < 3; ++i) step(small);
  ASSERT_EQ(a.planned_stats().replans, 1u);
  EXPECT_EQ(f.fallback->trims(), 1u) << "the smaller plan fits the arena: nothing trimmed";
  const std::vector<std::size_t> larger = {9 << 16, 9 << 16, 9 << 16};
  for (int i = 0; i < 3; ++i) step(larger);
  ASSERT_EQ(a.planned_stats().replans, 2u);
  EXPECT_EQ(f.fallback->trims(), 2u) << "a larger arena: the fallback trimmed first";
}

TEST(PlannedArena, ReplansAfterMismatchLimit) {
  Fixture f;
  PlannedOptions o = f.options();
  o.mismatch_limit = 2;
  PlannedAllocator a(o);
  PatternChecker checker;
  auto step = [&](const std::vector<std::size_t>& sizes) { marked_step(a, sizes); };
  std::vector<std::size_t> A = {1 << 16, 3 << 16, 1 << 16},
                           B = {5 << 16, 1 << 16, 7 << 16, 1 << 16};
  step(A);
  step(A);
  step(A);
  EXPECT_EQ(a.planned_stats().hits, 3u);
  step(B);
  EXPECT_EQ(a.planned_stats().replans, 0u);
  step(B);
  EXPECT_EQ(a.planned_stats().replans, 1u);
  auto before = a.planned_stats().hits;
  step(B);
  EXPECT_EQ(a.planned_stats().hits, before + 4);
  step(A);  // still planned
  EXPECT_EQ(a.planned_stats().hits, before + 7);
  EXPECT_EQ(a.planned_stats().plans_kept, 2u);
}

TEST(PlannedArena, ExtraAndFewerRequestsAreCountedAndServed) {
  Fixture f;
  PlannedAllocator a(f.options());
  auto run = [&](std::size_t n) {
    a.begin_step();
    std::vector<void*> ps;
    for (std::size_t i = 0; i < n; ++i) ps.push_back(a.allocate(100000));
    for (auto p : ps) a.deallocate(p);
    a.end_step();
  };
  run(3);
  run(3);
  run(5);  // two more than planned
  auto s = a.planned_stats();
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 2u);
  run(2);  // truncated
  s = a.planned_stats();
  EXPECT_EQ(s.mismatched_steps, 2u);
}

TEST(PlannedArena, BlocksOutlivingTheStepStayOutOfThePlan) {
  Fixture f;
  PlannedAllocator a(f.options());
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) {
    a.begin_step();
    void* t = a.allocate(1 << 18);
    kept.push_back(a.allocate(1 << 17));  // lives on (a cache, an output)
    a.deallocate(t);
    a.end_step();
  }
  auto s = a.planned_stats();
  EXPECT_EQ(s.hits, 2u);  // the temporary of steps 3 and 4
  for (void* p : kept) EXPECT_FALSE(a.in_arena(p));
  for (void* p : kept) a.deallocate(p);
}

TEST(PlannedArena, HeldArenaBlockIsNeverHandedOutAgain) {
  Fixture f;
  PlannedAllocator a(f.options());
  PatternChecker checker;
  std::size_t id = 0;
  auto step = [&](bool hold_first) {
    a.begin_step();
    std::size_t first = id;
    for (int i = 0; i < 3; ++i) {
      checker.on_alloc(id, a.allocate(200000), 200000);
      if (i > 0) {
        a.deallocate(checker.ptr(id - 1));
        checker.on_free(id - 1);
      }
      id++;
    }
    a.deallocate(checker.ptr(id - 1));
    checker.on_free(id - 1);
    (void)first;
    (void)hold_first;
    a.end_step();
  };
  step(false);
  step(false);
  // Step 3: the caller keeps the second block past its planned end.
  a.begin_step();
  void* b0 = a.allocate(200000);
  checker.on_alloc(1000, b0, 200000);
  void* b1 = a.allocate(200000);
  checker.on_alloc(1001, b1, 200000);
  EXPECT_TRUE(a.in_arena(b1));
  a.deallocate(b0);
  checker.on_free(1000);
  a.end_step();
  // Step 4: slot 0 is free, slot 1 is still held, slot 2 reuses slot 0's range.
  a.begin_step();
  for (std::size_t i = 0; i < 3; ++i) {
    checker.on_alloc(2000 + i, a.allocate(200000), 200000);
    checker.check_all();
    ASSERT_FALSE(HasFatalFailure());
  }
  a.end_step();
  auto s = a.planned_stats();
  EXPECT_GE(s.occupied, 1u);
  free_all(a, checker);  // b1 included
}

TEST(PlannedArena, ShuffledStepsNeverOverlap) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50")));
  std::mt19937 rng(42);
  std::size_t next = 1u << 20;
  std::vector<std::vector<TraceEvent>> run = {steps[0], steps[1]};
  for (int r = 0; r < 4; ++r) {
    // Move each event by a random distance, keeping every free after its alloc.
    auto s = renumber(steps[1], next);
    for (std::size_t i = 0; i < s.size(); ++i) {
      std::size_t j = std::min(s.size() - 1, i + rng() % 8);
      std::swap(s[i], s[j]);
    }
    std::set<std::size_t> seen;
    std::vector<TraceEvent> fixed, late;
    for (auto& e : s) {
      if (e.kind == TraceEvent::kAlloc) seen.insert(e.id);
      if (e.kind == TraceEvent::kFree && !seen.count(e.id))
        late.push_back(e);
      else
        fixed.push_back(e);
    }
    fixed.insert(fixed.end(), late.begin(), late.end());
    run.push_back(fixed);
  }
  PatternChecker checker;
  PlannedAllocator a(f.options());
  replay(a, run, checker, true, true, 4);
  auto st = a.planned_stats();
  EXPECT_GT(st.hits, 0u);
  EXPECT_GT(st.misses, 0u);
  free_all(a, checker);
}

TEST(PlannedArena, TruncatedStepsNeverOverlap) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_bert")));
  std::size_t next = 1u << 20;
  std::vector<std::vector<TraceEvent>> run = {steps[0], steps[1]};
  for (std::size_t cut : {10u, 200u, 444u, 1u, 700u}) {
    auto s = renumber(steps[1], next);
    s.resize(std::min<std::size_t>(cut, s.size()));  // blocks stay live past the step's end
    run.push_back(s);
  }
  run.push_back(renumber(steps[1], next));
  PatternChecker checker;
  PlannedAllocator a(f.options());
  replay(a, run, checker, true, true, 4);
  EXPECT_GT(a.planned_stats().occupied, 0u);
  free_all(a, checker);
}

TEST(PlannedArena, InterleavedThreadsNeverOverlap) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50")));
  PlannedAllocator a(f.options());
  PatternChecker warm;
  replay(a, {steps[0], steps[1]}, warm, true, false);
  ASSERT_EQ(a.planned_stats().plans_made, 1u);
  // Three threads each replay the step at once inside shared steps: their requests interleave
  // arbitrarily. Each checks its own blocks; a global checker catches cross-thread overlaps.
  std::mutex global_mutex;
  PatternChecker global;
  std::atomic<bool> failed{false};
  for (int round = 0; round < 3; ++round) {
    a.begin_step();
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        std::size_t next = (static_cast<std::size_t>(round) * 3 + t + 1) << 24;
        auto s = renumber(steps[2], next);
        PatternChecker mine;
        for (const auto& e : s) {
          if (e.kind == TraceEvent::kAlloc) {
            void* p = a.allocate(e.size);
            {
              std::lock_guard lock(global_mutex);
              global.on_alloc(e.id, p, e.size);
            }
            mine.on_alloc(e.id, p, e.size);
          } else if (e.kind == TraceEvent::kFree && mine.live(e.id)) {
            mine.check_all();
            void* p = mine.ptr(e.id);
            {
              std::lock_guard lock(global_mutex);
              global.on_free(e.id);
            }
            mine.on_free(e.id);
            a.deallocate(p);
          }
          if (::testing::Test::HasFailure()) {
            failed = true;
            return;
          }
        }
        mine.check_all();
        for (auto id : mine.live_ids()) {
          void* p = mine.ptr(id);
          {
            std::lock_guard lock(global_mutex);
            global.on_free(id);
          }
          mine.on_free(id);
          a.deallocate(p);
        }
      });
    }
    for (auto& th : threads) th.join();
    a.end_step();
    ASSERT_FALSE(failed.load());
  }
  auto s = a.planned_stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.misses, 0u);
  free_all(a, warm);
  EXPECT_EQ(f.fallback->live(), 0u);
}

TEST(PlannedArena, AutomaticStepsFromTheRepeatingPattern) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50")));
  std::size_t next = 1u << 20;
  std::vector<std::vector<TraceEvent>> run = steps;
  for (int i = 0; i < 4; ++i) run.push_back(renumber(steps[1], next));
  PlannedOptions o = f.options();
  o.auto_steps = true;
  PlannedAllocator a(o);
  PatternChecker checker;
  replay(a, run, checker, /*marks=*/false, /*check=*/false);
  auto s = a.planned_stats();
  EXPECT_EQ(s.period, allocs_in(steps[1]));
  EXPECT_GE(s.plans_made, 1u);
  // At least the last three inferences are served from the arena.
  EXPECT_GE(s.hits, 3u * 250u);
  EXPECT_EQ(s.misses, 0u);
  free_all(a, checker);
}

TEST(PlannedArena, AutomaticStepsSurviveAShapeChange) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_bert_varlen")));  // 32,128,64,32,128,64
  std::size_t next = 1u << 20;
  std::vector<std::vector<TraceEvent>> run;
  for (int i = 0; i < 10; ++i) run.push_back(renumber(steps[0], next));  // seq 32
  for (int i = 0; i < 8; ++i) run.push_back(renumber(steps[1], next));   // seq 128
  PlannedOptions o = f.options();
  o.auto_steps = true;
  PlannedAllocator a(o);
  PatternChecker checker;
  replay(a, run, checker, false, true, 8);
  auto s = a.planned_stats();
  EXPECT_EQ(s.period, allocs_in(steps[1])) << s.hits << " hits " << s.misses << " misses";
  EXPECT_GE(s.plans_made, 2u);
  // Re-learning takes about seven steps here: mismatching steps of the old period, 1024 new
  // requests before the detection runs, the phase, one step to plan.
  EXPECT_GE(s.hits, 4u * allocs_in(steps[1]))
      << s.misses << " misses, " << s.plans_made << " plans, " << s.mismatched_steps
      << " mismatched steps, " << s.steps << " steps, " << s.unplanned << " unplanned, "
      << s.occupied;
  free_all(a, checker);
}

TEST(PlannedArena, AutomaticStepsFollowTheProgramsMarksOnceItMarksOne) {
  Fixture f;
  auto steps = split_steps(read_trace(trace_path("torch_resnet50")));
  std::size_t next = 1u << 20;
  std::vector<std::vector<TraceEvent>> unmarked, marked;
  for (int i = 0; i < 6; ++i) unmarked.push_back(renumber(steps[1], next));
  for (int i = 0; i < 5; ++i) marked.push_back(renumber(steps[1], next));
  PlannedOptions o = f.options();
  o.auto_steps = true;
  PlannedAllocator a(o);
  EXPECT_NE(a.describe().find("steps=auto"), std::string::npos);
  PatternChecker checker;
  replay(a, unmarked, checker, /*marks=*/false, /*check=*/false);
  const alloc::PlannedStats detected = a.planned_stats();
  EXPECT_EQ(detected.period, allocs_in(steps[1]));  // found from the pattern first
  // The program marks its steps from now on: one warm-up step, one learnt, then every one
  // served whole from the arena.
  replay(a, {marked[0], marked[1]}, checker, /*marks=*/true, /*check=*/false);
  EXPECT_NE(a.describe().find("steps=marked"), std::string::npos) << a.describe();
  const alloc::PlannedStats learnt = a.planned_stats();
  EXPECT_EQ(learnt.period, 0u);
  EXPECT_EQ(learnt.plans_kept, 1u);
  EXPECT_EQ(learnt.plans_made, detected.plans_made + 1);
  const std::size_t arenas = f.device->allocations();
  replay(a, {marked[2], marked[3], marked[4]}, checker, /*marks=*/true, /*check=*/true, 64);
  const alloc::PlannedStats served = a.planned_stats();
  EXPECT_EQ(served.hits - learnt.hits, 3 * allocs_in(steps[1]));
  EXPECT_EQ(served.misses, learnt.misses);
  EXPECT_EQ(f.device->allocations(), arenas);  // no device call in a served step
  free_all(a, checker);
}

TEST(PlannedArena, BiggerPlanKeepsOldArenaUntilItsBlocksReturn) {
  Fixture f;
  PlannedOptions o = f.options();
  o.mismatch_limit = 1;
  PlannedAllocator a(o);
  auto step = [&](std::size_t size, bool) {
    a.begin_step();
    void* p = a.allocate(size);
    void* q = a.allocate(size);
    a.deallocate(q);
    a.deallocate(p);
    a.end_step();
  };
  step(1 << 16, false);
  step(1 << 16, false);
  // Served by the plan and then kept past the step.
  a.begin_step();
  void* held = a.allocate(1 << 16);
  a.end_step();
  EXPECT_TRUE(a.in_arena(held));
  // A much bigger shape: a new, bigger arena while `held` still lives in the old one.
  step(1 << 22, false);
  step(1 << 22, false);
  EXPECT_EQ(a.planned_stats().arena_allocations, 2u);
  EXPECT_EQ(f.device->allocations(), 2u);
  EXPECT_TRUE(a.in_arena(held));
  a.deallocate(held);
  EXPECT_FALSE(a.in_arena(held));
  EXPECT_LE(f.device->outstanding(), (8u << 20) + 4096u);
}

TEST(PlannedArena, StatsAndDescribe) {
  Fixture f;
  PlannedAllocator a(f.options());
  for (int i = 0; i < 3; ++i) {
    a.begin_step();
    void* p = a.allocate(300000);
    a.deallocate(p);
    a.end_step();
  }
  auto s = a.stats();
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_GE(s.reserved_bytes.all.current, 300000);
  EXPECT_NE(a.describe().find("planned("), std::string::npos);
  EXPECT_EQ(a.planned_stats().peak_live, 300000u);
}

// Until a plan serves the steps, the statistics say what the arena waits for, stage by stage:
// marks, the warm-up, the step being watched; then nothing. With automatic steps: the pattern,
// then the first whole step. (MODELMEM_REPORT and Python's report() print it.)
TEST(PlannedArena, SaysWhyNoPlanServesTheStepsYet) {
  Fixture f;
  auto why = [](const PlannedAllocator& a) { return alloc::describe_no_plan(a.planned_stats()); };
  auto has = [](const std::string& text, const char* part) {
    return text.find(part) != std::string::npos;
  };
  {
    PlannedAllocator a(f.options());  // marked steps, one warm-up step
    void* early = a.allocate(4096);
    EXPECT_TRUE(has(why(a), "no step marked")) << why(a);
    EXPECT_TRUE(has(why(a), "1 requests so far")) << why(a);
    a.deallocate(early);
    a.begin_step();
    a.deallocate(a.allocate(300000));
    a.end_step();
    EXPECT_TRUE(has(why(a), "1 of 1 warm-up step(s) ended")) << why(a);
    a.begin_step();
    a.deallocate(a.allocate(300000));
    EXPECT_TRUE(has(why(a), "has not ended yet")) << why(a);
    a.end_step();
    EXPECT_EQ(why(a), "");
    EXPECT_EQ(a.planned_stats().plans_made, 1u);
  }
  {
    PlannedOptions o = f.options();
    o.min_size = 1 << 20;  // every request below it: nothing to plan
    PlannedAllocator a(o);
    for (int i = 0; i < 3; ++i) {
      a.begin_step();
      a.deallocate(a.allocate(4096));
      a.end_step();
    }
    EXPECT_TRUE(has(why(a), "no request of at least planned_min_kb (1024 KiB)")) << why(a);
  }
  {
    PlannedOptions o = f.options();
    o.auto_steps = true;
    PlannedAllocator a(o);
    const std::size_t sizes[] = {4096, 8192, 12288, 16384, 20480};
    std::size_t n = 0;
    for (; n < 10; ++n) a.deallocate(a.allocate(sizes[n % 5]));
    EXPECT_TRUE(has(why(a), "no repeating step found in 10 requests")) << why(a);
    while (a.planned_stats().period == 0 && n < 1000) a.deallocate(a.allocate(sizes[n++ % 5]));
    ASSERT_EQ(a.planned_stats().period, 5u);
    EXPECT_TRUE(has(why(a), "a repeating step of 5 requests was found")) << why(a);
    for (int i = 0; i < 10; ++i) a.deallocate(a.allocate(sizes[n++ % 5]));
    EXPECT_EQ(why(a), "");
    EXPECT_GE(a.planned_stats().hits, 1u);
  }
}

// A device that records the large-page hints it gets and answers them as told.
class HintDevice : public MmapDevice {
 public:
  explicit HintDevice(bool answer) : answer_(answer) {}
  bool prefer_large_pages(void* addr, std::size_t bytes) noexcept override {
    hints.emplace_back(addr, bytes);
    return answer_;
  }
  std::vector<std::pair<void*, std::size_t>> hints;

 private:
  bool answer_;
};

// Three marked steps of one 3 MiB block: the second is planned, the third served from the arena.
void three_steps(PlannedAllocator& a) {
  for (int i = 0; i < 3; ++i) {
    a.begin_step();
    void* p = a.allocate(3u << 20);
    a.deallocate(p);
    a.end_step();
  }
}

TEST(PlannedArena, TheArenaIsOfferedToLargePages) {
  for (bool answer : {true, false}) {
    Fixture f;
    auto device = std::make_shared<HintDevice>(answer);
    PlannedOptions o = f.options();
    o.device = device;
    PlannedAllocator a(o);
    EXPECT_EQ(a.arena_range().second, 0u);
    three_steps(a);
    ASSERT_EQ(a.planned_stats().hits, 1u);
    const auto [base, size] = a.arena_range();
    ASSERT_NE(base, nullptr);
    EXPECT_GE(size, 3u << 20);
    // One hint, for exactly the arena (the fallback's blocks get none).
    ASSERT_EQ(device->hints.size(), 1u);
    EXPECT_EQ(device->hints[0].first, base);
    EXPECT_EQ(device->hints[0].second, size);
    EXPECT_EQ(a.planned_stats().arena_huge_pages, answer);
    EXPECT_NE(a.describe().find("huge_pages=on"), std::string::npos);
  }
}

TEST(PlannedArena, NoLargePageHintWhenTurnedOff) {
  Fixture f;
  auto device = std::make_shared<HintDevice>(true);
  PlannedOptions o = f.options();
  o.device = device;
  o.huge_pages = false;
  PlannedAllocator a(o);
  three_steps(a);
  EXPECT_EQ(a.planned_stats().hits, 1u);
  EXPECT_TRUE(device->hints.empty());
  EXPECT_FALSE(a.planned_stats().arena_huge_pages);
  EXPECT_NE(a.describe().find("huge_pages=off"), std::string::npos);
}

TEST(PlannedArena, ADeviceWithoutLargePagesDeclinesTheHint) {
  Fixture f;  // MmapDevice keeps Device's default: no large pages
  PlannedAllocator a(f.options());
  three_steps(a);
  EXPECT_EQ(a.planned_stats().hits, 1u);
  EXPECT_FALSE(a.planned_stats().arena_huge_pages);
}

// Memory the CPU may not write (a GPU's, an NPU's, the sizing layer's address space): the arena
// is never prefaulted. The device hands out PROT_NONE mappings, so a single write by the
// allocator would kill the test with SIGSEGV; before host_accessible() the prefault wrote one
// byte per page of every arena whatever the device (a CUDA arena would have crashed, and sizing
// a planned arena of 80 GiB touched 80 GiB of host memory).
TEST(PlannedArena, NeverTouchesMemoryTheCpuMayNotWrite) {
  class Untouchable : public MmapDevice {
   public:
    std::string name() const override { return "untouchable:0"; }
    bool host_accessible() const noexcept override { return false; }
    void* allocate(std::size_t bytes) override {
      void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw OutOfMemory(OomInfo{bytes, 0, 0, 0, 0, {}, name()});
      ++arenas;
      return p;
    }
    void deallocate(void* ptr, std::size_t bytes) noexcept override { munmap(ptr, bytes); }
    int arenas = 0;
  };
  auto device = std::make_shared<Untouchable>();
  PlannedOptions o;
  o.device = device;
  o.fallback = std::make_shared<MallocAllocator>();
  o.solver = "best-fit";
  ASSERT_TRUE(o.prefault);  // the default: asked for, and skipped for this device
  PlannedAllocator a(o);
  for (int i = 0; i < 4; ++i) {
    a.begin_step();
    void* x = a.allocate(std::size_t{64} << 20);
    void* y = a.allocate(std::size_t{32} << 20);
    a.deallocate(x);
    a.deallocate(y);
    a.end_step();
  }
  EXPECT_GE(device->arenas, 1);
  EXPECT_GE(a.planned_stats().hits, 2u);
}

}  // namespace
}  // namespace modelmem::testing

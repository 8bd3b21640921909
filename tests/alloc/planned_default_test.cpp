// What makes the planned arena "never worse than nothing" as modelmem run's default: short
// programs are planned (periods found before 1,024 requests), a plan that would hold more than
// the fallback alone is refused, and a step it serves costs the page faults it reports.
#include "planned_support.hpp"

namespace modelmem::testing {
namespace {

using alloc::PlannedAllocator;
using alloc::PlannedOptions;

PlannedOptions options_on(std::shared_ptr<MmapDevice> device,
                          std::shared_ptr<MallocAllocator> fallback) {
  PlannedOptions o;
  o.device = std::move(device);
  o.fallback = std::move(fallback);
  o.solver = "best-fit";
  return o;
}

TEST(PlannedDefault, APeriodOfTwentyRequestsIsFoundInAProgramOfTwoHundred) {
  auto device = std::make_shared<MmapDevice>();
  auto fallback = std::make_shared<MallocAllocator>();
  PlannedOptions o = options_on(device, fallback);
  o.auto_steps = true;
  PlannedAllocator a(o);
  for (int step = 0; step < 10; ++step) {
    std::vector<void*> blocks;
    for (int i = 0; i < 20; ++i) blocks.push_back(a.allocate((64u + 8u * i) << 10));
    for (void* p : blocks) a.deallocate(p);
  }
  auto s = a.planned_stats();
  EXPECT_EQ(s.period, 20u);
  EXPECT_GE(s.plans_made, 1u);
  EXPECT_GE(s.hits, 3u * 20u);  // at least the last three steps from the arena
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(fallback->live(), 0u);
}

TEST(PlannedDefault, APlanHoldingMoreThanTheFallbackAloneIsRefused) {
  auto device = std::make_shared<MmapDevice>();
  auto fallback = std::make_shared<MallocAllocator>();
  PlannedAllocator a(options_on(device, fallback));
  std::vector<void*> kept;
  // Each step: a temporary freed, then a block as large that outlives the step. Alone, the
  // fallback needs one block's worth during the step; a plan would add an arena for the
  // temporary beside the block that stays with the fallback.
  for (int step = 0; step < 6; ++step) {
    a.begin_step();
    void* t = a.allocate(1u << 20);
    a.deallocate(t);
    kept.push_back(a.allocate(1u << 20));
    a.end_step();
  }
  auto s = a.planned_stats();
  EXPECT_EQ(s.plans_made, 0u);
  EXPECT_EQ(s.arena_size, 0u);
  // Tried after the warm-up step, then after 1 and 2 more steps (backing off), not every step.
  EXPECT_GE(s.plans_refused, 2u);
  EXPECT_LE(s.plans_refused, 3u);
  EXPECT_EQ(s.waiting, alloc::PlanWait::kRefused);
  const std::string why = alloc::describe_no_plan(s);
  EXPECT_NE(why.find("plan(s) refused: the arena and the blocks that outlive their step"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("(6 ended so far)"), std::string::npos) << why;
  EXPECT_EQ(device->outstanding(), 0u);
  for (void* p : kept) a.deallocate(p);
}

TEST(PlannedDefault, APlanThatSavesMemoryIsTaken) {
  auto device = std::make_shared<MmapDevice>();
  auto fallback = std::make_shared<MallocAllocator>();
  PlannedAllocator a(options_on(device, fallback));
  std::vector<void*> kept;
  for (int step = 0; step < 4; ++step) {
    a.begin_step();
    kept.push_back(a.allocate(1u << 20));  // outlives the step, made while the temporary lives
    void* t = a.allocate(1u << 20);
    a.deallocate(t);
    a.end_step();
  }
  auto s = a.planned_stats();
  EXPECT_EQ(s.plans_made, 1u);
  EXPECT_EQ(s.plans_refused, 0u);
  EXPECT_EQ(s.hits, 2u);
  for (void* p : kept) a.deallocate(p);
}

// The page faults of the steps a plan serves whole: none where a step touches only the
// pre-faulted arena, and each page where a step also writes memory new to the process.
TEST(PlannedDefault, StepsServedByThePlanCountThePageFaultsTheKernelCounted) {
  auto device = std::make_shared<MmapDevice>();
  auto fallback = std::make_shared<MallocAllocator>();
  PlannedOptions o = options_on(device, fallback);
  o.prefault = true;
  o.huge_pages = false;
  PlannedAllocator a(o);
  std::vector<void*> blocks;
  blocks.reserve(4);
  auto step = [&](bool touch_new_pages) {
    blocks.clear();
    a.begin_step();
    for (int i = 0; i < 4; ++i) blocks.push_back(a.allocate(256u << 10));
    if (touch_new_pages) {
      // 64 pages the process never had, written inside the step.
      const std::size_t bytes = 64 * 4096;
      void* fresh =
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(fresh, MAP_FAILED);
      for (std::size_t b = 0; b < bytes; b += 4096) static_cast<volatile char*>(fresh)[b] = 1;
      munmap(fresh, bytes);
    }
    for (void* p : blocks) std::memset(p, 1, 4096);
    for (void* p : blocks) a.deallocate(p);
    a.end_step();
  };
  for (int i = 0; i < 3; ++i) step(false);  // warm-up, then the step that is planned
  auto s = a.planned_stats();
  ASSERT_EQ(s.plans_made, 1u);
  const std::uint64_t before = s.served_steps;
  for (int i = 0; i < 4; ++i) step(false);
  s = a.planned_stats();
  EXPECT_EQ(s.served_steps, before + 4);
  // The arena's pages were touched when it was obtained: these steps fault nowhere in a plain
  // build (a sanitizer's shadow memory may still fault a few pages), far below a step that
  // writes 64 new pages.
  const std::uint64_t quiet_max = s.served_step_max;
  EXPECT_LT(quiet_max, 32u);
#ifndef __SANITIZE_ADDRESS__
  EXPECT_GE(s.faultless_steps, before + 3) << "most steps served from the arena fault nowhere";
#endif
  step(true);
  s = a.planned_stats();
  EXPECT_EQ(s.served_steps, before + 5);
  EXPECT_GE(s.served_step_max, 64u) << "the 64 fresh pages written in the step were counted";
  EXPECT_GT(s.served_step_max, quiet_max);
  EXPECT_GE(s.served_step_minor + s.served_step_major, 64u);
}

}  // namespace
}  // namespace modelmem::testing

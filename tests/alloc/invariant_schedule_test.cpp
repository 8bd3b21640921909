// The schedule of the invariant checks in checking builds: the local checks run after every
// operation, the whole-structure walk after every operation while the structure is small and
// then once every size / kWalkBudget operations, so a long run stays linear; a broken state is
// still caught, by the local check at once or by the walk within its period.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc/invariant_probe.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/alloc/unchecked_scope.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::alloc {
namespace {

// A strategy over the C heap that counts its checks: local checks, walks, elements walked.
class Counted : public Allocator {
 public:
  std::size_t local_checks = 0, walks = 0, walked = 0;

 private:
  void* do_allocate(std::size_t size, Stream) override {
    void* p = std::malloc(size);
    live_[p] = size;
    return p;
  }
  void do_deallocate(void* p) override {
    auto it = live_.find(p);
    if (it == live_.end()) throw InvalidInput("counted: not live");
    live_.erase(it);
    std::free(p);
  }
  Stats do_stats() const override { return {}; }
  void do_reset_peak() override {}
  std::string do_describe() const override { return "counted"; }
  LiveBlock do_block(const void* p) const override {
    auto it = live_.find(const_cast<void*>(p));
    return it == live_.end() ? LiveBlock{} : LiveBlock{it->second, 0, 0};
  }
  std::string do_check_local() const override {
    ++local_checks_;
    return {};
  }
  std::string do_check_invariants() const override {
    ++walks_;
    walked_ += live_.size();
    return {};
  }
  std::size_t do_invariant_size() const override { return live_.size(); }

 public:
  void read_counts() {
    local_checks = local_checks_;
    walks = walks_;
    walked = walked_;
  }

 private:
  std::unordered_map<void*, std::size_t> live_;
  mutable std::size_t local_checks_ = 0, walks_ = 0, walked_ = 0;
};

std::unique_ptr<Counted> checking_counted() {
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  auto a = std::make_unique<Counted>();
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  return a;
}

TEST(InvariantSchedule, WalksEveryOperationWhileSmallThenInProportionToTheSize) {
  EXPECT_EQ(Allocator::walk_period(0), 1u);
  EXPECT_EQ(Allocator::walk_period(Allocator::kWalkBudget), 1u);
  EXPECT_EQ(Allocator::walk_period(100 * Allocator::kWalkBudget), 100u);

  auto a = checking_counted();
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < Allocator::kWalkBudget; ++i) blocks.push_back(a->allocate(16));
  a->read_counts();
  EXPECT_EQ(a->walks, Allocator::kWalkBudget);  // small: every operation walked
  EXPECT_EQ(a->local_checks, Allocator::kWalkBudget);
  for (void* p : blocks) a->deallocate(p);
}

// Allocators made inside an UncheckedScope (the sizing layer's replays) skip every check; the
// scope ends with its block and nests.
TEST(InvariantSchedule, AnUncheckedScopeTurnsTheChecksOffForWhatItConstructs) {
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  std::unique_ptr<Counted> inside, nested, after;
  {
    const UncheckedScope outer;
    {
      const UncheckedScope inner;
      nested = std::make_unique<Counted>();
    }
    inside = std::make_unique<Counted>();
  }
  after = std::make_unique<Counted>();
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  for (Counted* a : {inside.get(), nested.get(), after.get()}) a->deallocate(a->allocate(16));
  inside->read_counts();
  nested->read_counts();
  after->read_counts();
  EXPECT_EQ(inside->local_checks + inside->walks, 0u);
  EXPECT_EQ(nested->local_checks + nested->walks, 0u);
  EXPECT_EQ(after->local_checks, 2u);  // the scope is over: checked again
}

TEST(InvariantSchedule, ALongRunStaysLinear) {
  auto a = checking_counted();
  constexpr std::size_t kBlocks = 20000;
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < kBlocks; ++i) blocks.push_back(a->allocate(16));
  for (void* p : blocks) a->deallocate(p);
  a->read_counts();
  const std::size_t ops = 2 * kBlocks;
  EXPECT_EQ(a->local_checks, ops);  // the local checks: every operation
  // A walk after every operation would visit kBlocks^2 = 4e8 elements; the schedule visits
  // about kWalkBudget per operation.
  EXPECT_LE(a->walked, 2 * Allocator::kWalkBudget * ops);
  EXPECT_GE(a->walked, Allocator::kWalkBudget * ops / 4);
  EXPECT_LT(a->walks, ops / 10);
}

// On a large structure a broken counter the local checks see aborts the next operation.
TEST(InvariantSchedule, TheLocalCheckCatchesAtOnceOnALargeStructure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  auto a = std::make_shared<SystemAllocator>();
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  std::vector<void*> blocks;
  for (int i = 0; i < 4000; ++i) blocks.push_back(a->allocate(64));
  InvariantProbe::skew(*a, 512);
  EXPECT_DEATH(a->allocate(64), "invariant broken after allocate in system.*statistics differ");
  InvariantProbe::skew(*a, -512);
  for (void* p : blocks) a->deallocate(p);
}

// What only the walk sees (the planned arena's live bytes) is caught within one period.
TEST(InvariantSchedule, TheWalkCatchesWithinItsPeriodOnALargeStructure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  PlannedOptions o;
  o.device = device::make_host_device();
  o.fallback = std::make_shared<SystemAllocator>();
  auto a = std::make_shared<PlannedAllocator>(std::move(o));
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  std::vector<void*> blocks;
  for (int i = 0; i < 4000; ++i) blocks.push_back(a->allocate(64));
  const std::uint64_t period = Allocator::walk_period(a->invariant_size());
  ASSERT_GT(period, 50u);
  InvariantProbe::skew(*a, 512);
  EXPECT_DEATH(
      {
        for (std::uint64_t i = 0; i <= period; ++i) a->trim();
      },
      "invariant broken after trim in planned.*live bytes counted");
  InvariantProbe::skew(*a, -512);
  for (void* p : blocks) a->deallocate(p);
  EXPECT_EQ(a->check_invariants(), "");
  (void)kMiB;
}

}  // namespace
}  // namespace modelmem::alloc

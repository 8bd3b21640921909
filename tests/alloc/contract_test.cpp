// The allocator contract written once in the base class: what a strategy's hooks never do
// themselves (refuse size 0, emit block events, check invariants) happens for every allocator,
// adaptors hand the listener down so each event arrives once, and the query interface answers
// what callers used to cast for.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "alloc/event_recorder.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::alloc {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A strategy with one block of state, whose invariant the test can break.
class Toy : public Allocator {
 public:
  bool broken = false;
  int hooks_called = 0;

 private:
  void* do_allocate(std::size_t size, Stream) override {
    ++hooks_called;
    size_ = size;
    return &storage_;
  }
  void do_deallocate(void* p) override {
    if (p != &storage_ || size_ == 0) throw InvalidInput("toy: not live");
    size_ = 0;
  }
  Stats do_stats() const override { return {}; }
  void do_reset_peak() override {}
  std::string do_describe() const override { return "toy: one block"; }
  LiveBlock do_block(const void* p) const override {
    return p == &storage_ && size_ != 0 ? LiveBlock{size_, 0, 0} : LiveBlock{};
  }
  std::string do_check_invariants() const override { return broken ? "toy is broken" : ""; }

  alignas(256) unsigned char storage_[256] = {};
  std::size_t size_ = 0;
};

TEST(Contract, SizeZeroAndNullAreHandledBeforeTheHooks) {
  Toy toy;
  try {
    toy.allocate(0);
    FAIL() << "size 0 was served";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "toy: allocation of 0 bytes");
  }
  EXPECT_EQ(toy.hooks_called, 0);
  EXPECT_NO_THROW(toy.deallocate(nullptr));
  EXPECT_EQ(toy.block_size(nullptr), 0u);
}

TEST(Contract, ABrokenInvariantAbortsWhenChecking) {
  // MODELMEM_CHECK_INVARIANTS=1 turns the checks on in any build, for allocators made after.
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  auto toy = std::make_unique<Toy>();
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  void* p = toy->allocate(10);
  toy->deallocate(p);
  toy->broken = true;
  EXPECT_DEATH(toy->allocate(10),
               "invariant broken after allocate in toy: one block: toy is broken");
}

// A quota over a planned arena over a caching pool, the listener on the quota: each block event
// once, from the quota; the segments of the caching pool and the arena's reach it too.
TEST(Contract, AdaptorsHandTheListenerDownAndEachEventArrivesOnce) {
  auto host = device::make_host_device();
  auto caching = std::make_shared<CachingAllocator>(host);
  PlannedOptions o;
  o.device = host;
  o.fallback = caching;
  auto planned = std::make_shared<PlannedAllocator>(o);
  auto quota = std::make_shared<QuotaAdaptor>(planned, QuotaOptions{"m", 64 * kMiB, 256, host});
  testing::EventRecorder rec;
  quota->set_listener(&rec);
  for (int step = 0; step < 4; ++step) {
    quota->begin_step();
    void* a = quota->allocate(3 * kMiB);
    void* b = quota->allocate(1000);
    quota->deallocate(a);
    quota->deallocate(b);
    quota->end_step();
  }
  EXPECT_THROW(quota->allocate(65 * kMiB), QuotaExceeded);
  quota->set_listener(nullptr);
  EXPECT_EQ(rec.count(EventKind::kAlloc), 8);
  EXPECT_EQ(rec.count(EventKind::kFree), 8);
  EXPECT_EQ(rec.count(EventKind::kOom), 1);
  EXPECT_EQ(rec.count(EventKind::kMark), 8) << "step marks from the quota only";
  EXPECT_GE(rec.count(EventKind::kSegmentAlloc), 2) << "the caching pool's and the arena's";
  // The queries see through the adaptors, with no cast.
  EXPECT_EQ(quota->upstream(), planned.get());
  EXPECT_EQ(planned->upstream(), caching.get());
  EXPECT_EQ(caching->upstream(), nullptr);
  ASSERT_TRUE(quota->stats().planned.has_value());
  EXPECT_EQ(quota->stats().planned->steps, planned->planned_stats().steps);
  EXPECT_FALSE(caching->stats().planned.has_value());
}

TEST(Contract, ARouterTagsEventsWithItsPoolAndSelectsPoolsThroughTheInterface) {
  auto host = device::make_host_device();
  auto main = std::make_shared<DirectAllocator>(host);
  std::vector<NamedPool> pools;
  pools.push_back(
      {"a", 8 * kMiB, std::make_shared<StaticAllocator>(host, StaticOptions{8 * kMiB, 256})});
  pools.push_back({"b", 8 * kMiB, std::make_shared<DirectAllocator>(host)});
  auto router = std::make_shared<PoolRouter>(main, pools);
  const Allocator& any = *router;
  ASSERT_EQ(any.pools().size(), 2u);
  EXPECT_EQ(any.upstream(), main.get());
  testing::EventRecorder rec;
  router->set_listener(&rec);
  push_pool(any, "b");
  EXPECT_EQ(current_pool(any), "b");
  void* p = router->allocate(5000);
  EXPECT_TRUE(pop_pool());
  EXPECT_EQ(current_pool(any), "");
  EXPECT_EQ(router->block(p).pool, 2u);
  EXPECT_EQ(router->block_size(p), 5000u);
  router->deallocate(p);
  EXPECT_THROW(push_pool(any, "c"), InvalidInput);
  router->set_listener(nullptr);
  int allocs = 0, frees = 0, segments = 0;
  for (const Event& e : rec.events) {
    if (e.kind == EventKind::kAlloc || e.kind == EventKind::kFree) {
      EXPECT_EQ(e.pool, 2u);
      EXPECT_EQ(e.size, 5000u);
      allocs += e.kind == EventKind::kAlloc;
      frees += e.kind == EventKind::kFree;
    }
    if (e.kind == EventKind::kSegmentAlloc && e.pool == 2u) ++segments;
  }
  EXPECT_EQ(allocs, 1);
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(segments, 1) << "pool b's direct segment, tagged with its pool";
}

}  // namespace
}  // namespace modelmem::alloc

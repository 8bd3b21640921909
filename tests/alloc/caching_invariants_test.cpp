// The caching pool's invariant checker: silent on every state a random workload reaches, and
// it fires on each kind of corruption a test hook makes on purpose.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "alloc/caching/impl.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::alloc {

// The test hook: reaches the pool's internals (friend of CachingAllocator).
struct CachingAllocatorTestAccess {
  using Impl = CachingAllocator::Impl;
  static Impl& impl(CachingAllocator& a) { return *a.impl_; }
};

namespace {

using PoolImpl = CachingAllocatorTestAccess::Impl;

PoolImpl& impl(CachingAllocator& a) {
  return CachingAllocatorTestAccess::impl(a);
}

// A pool with a split segment: two live blocks and a free one between them and after them.
struct SplitPool {
  CachingAllocator pool{device::make_host_device()};
  void* a = pool.allocate(200 * kKiB);
  void* b = pool.allocate(200 * kKiB);
  void* c = pool.allocate(200 * kKiB);
  SplitPool() { pool.deallocate(b); }
  ~SplitPool() {
    pool.deallocate(a);
    pool.deallocate(c);
  }
  Block* free_block() {
    for (Block* blk : impl(pool).small_)
      if (blk->addr == reinterpret_cast<std::uintptr_t>(b)) return blk;
    return nullptr;
  }
};

TEST(CachingInvariants, HoldAfterEveryOperationOfAMixedWorkload) {
  for (bool expandable : {false, true}) {
    device::DevicePtr dev = device::make_host_device();
    if (expandable && !dev->probe_virtual_memory().supported) continue;
    CachingOptions o;
    o.expandable_segments = expandable;
    o.thread_cache_bytes = expandable ? 0 : 1 * kMiB;
    CachingAllocator pool(dev, o);
    ASSERT_EQ(pool.check_invariants(), "");
    std::vector<void*> live;
    unsigned x = 1;
    for (int i = 0; i < 600; ++i) {
      x = x * 1103515245u + 12345u;
      if (live.size() < 20 && (x >> 16) % 3 != 0) {
        const std::size_t size = (x >> 8) % 4 == 0 ? 2 * kMiB + (x % kMiB) : 1 + x % (300 * kKiB);
        live.push_back(pool.allocate(size, (x >> 4) % 2));
      } else if (!live.empty()) {
        const std::size_t k = (x >> 12) % live.size();
        if ((x >> 3) % 7 == 0) pool.record_stream(live[k], 5);
        pool.deallocate(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
      if (i % 97 == 0) pool.synchronize();
      if (i % 151 == 0) pool.trim();
      ASSERT_EQ(pool.check_invariants(), "") << "operation " << i << " expandable " << expandable;
    }
    for (void* p : live) pool.deallocate(p);
    pool.synchronize();
    ASSERT_EQ(pool.check_invariants(), "");
  }
}

TEST(CachingInvariants, CatchesStatisticsThatDisagreeWithTheBlocks) {
  SplitPool s;
  ASSERT_EQ(s.pool.check_invariants(), "");
  Stats& stats = impl(s.pool).stats_;
  stats.allocated_bytes.all.current += 512;
  EXPECT_NE(s.pool.check_invariants().find("allocated_bytes"), std::string::npos)
      << s.pool.check_invariants();
  stats.allocated_bytes.all.current -= 512;
  stats.inactive_split.small.current += 1;
  EXPECT_NE(s.pool.check_invariants().find("inactive_split"), std::string::npos);
  stats.inactive_split.small.current -= 1;
  EXPECT_EQ(s.pool.check_invariants(), "");
}

TEST(CachingInvariants, CatchesAFreeBlockMissingFromItsFreeSet) {
  SplitPool s;
  Block* f = s.free_block();
  ASSERT_NE(f, nullptr);
  impl(s.pool).small_.erase(f);
  EXPECT_NE(s.pool.check_invariants().find("not in its pool's free set"), std::string::npos)
      << s.pool.check_invariants();
  impl(s.pool).small_.insert(f);
  EXPECT_EQ(s.pool.check_invariants(), "");
}

TEST(CachingInvariants, CatchesABlockInTwoPlaces) {
  SplitPool s;
  Block* f = s.free_block();
  ASSERT_NE(f, nullptr);
  impl(s.pool).active_.emplace(f->addr, f);  // free and live at once
  EXPECT_NE(s.pool.check_invariants().find("live map"), std::string::npos)
      << s.pool.check_invariants();
  impl(s.pool).active_.erase(f->addr);
  EXPECT_EQ(s.pool.check_invariants(), "");
}

TEST(CachingInvariants, CatchesBlocksThatDoNotTileTheSegment) {
  SplitPool s;
  Block* f = s.free_block();
  ASSERT_NE(f, nullptr);
  impl(s.pool).small_.erase(f);
  f->size -= 512;  // a gap before the next block
  impl(s.pool).small_.insert(f);
  EXPECT_NE(s.pool.check_invariants().find("tile"), std::string::npos) << s.pool.check_invariants();
  impl(s.pool).small_.erase(f);
  f->size += 512;
  impl(s.pool).small_.insert(f);
  EXPECT_EQ(s.pool.check_invariants(), "");
}

TEST(CachingInvariants, CatchesTwoAdjacentFreeBlocks) {
  SplitPool s;
  PoolImpl& m = impl(s.pool);
  Block* f = s.free_block();
  ASSERT_NE(f, nullptr);
  // Split the free block in two free halves without merging them back.
  m.pool_erase(f);
  Block* half = m.new_block();
  half->addr = f->addr + f->size / 2;
  half->size = f->size - f->size / 2;
  half->stream = f->stream;
  half->segment = f->segment;
  half->prev = f;
  half->next = f->next;
  f->next->prev = half;
  f->next = half;
  f->size /= 2;
  m.pool_insert(f);
  m.pool_insert(half);
  EXPECT_NE(s.pool.check_invariants().find("two adjacent free blocks"), std::string::npos)
      << s.pool.check_invariants();
  // Merge them again.
  m.pool_erase(f);
  m.pool_erase(half);
  f->size += half->size;
  f->next = half->next;
  half->next->prev = f;
  m.delete_block(half);
  m.pool_insert(f);
  EXPECT_EQ(s.pool.check_invariants(), "");
}

// The check runs inside the pool after every operation when asked for
// (MODELMEM_CHECK_INVARIANTS): the first operation after the state broke aborts.
TEST(CachingInvariants, ACheckingPoolAbortsOnTheNextOperation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  SplitPool s;
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  Stats& stats = impl(s.pool).stats_;
  stats.allocated_bytes.all.current += 512;
  EXPECT_DEATH(s.pool.deallocate(s.pool.allocate(4096)),
               "invariant broken after allocate in caching.*allocated_bytes");
  stats.allocated_bytes.all.current -= 512;
}

}  // namespace
}  // namespace modelmem::alloc

// The caching pool's thread caches (thread_cache_mb) and the first rung of the out-of-memory
// ladder (parked blocks and oversize blocks go back before everything else).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "event_recorder.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::alloc {
namespace {

using Recorder = modelmem::testing::EventRecorder;

CachingOptions with_cache(bool membarrier, std::size_t bytes = 4 * kMiB) {
  CachingOptions o;
  o.thread_cache_bytes = bytes;
  o.thread_cache_membarrier = membarrier;
  return o;
}

class ThreadCache : public ::testing::TestWithParam<bool> {};

TEST_P(ThreadCache, HitHandsTheSameBlockBackAndCountsExactly) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam()));
  Recorder rec;
  a.set_listener(&rec);
  void* p = a.allocate(64 * kKiB - 100);
  a.deallocate(p);  // parked in this thread's cache
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.requested_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.active.small.current, 0);
  void* q = a.allocate(64 * kKiB);  // same rounded size: a hit, with another requested size
  EXPECT_EQ(p, q);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(s.requested_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(s.requested_bytes.small.current, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(s.allocation.all.allocated, 2);
  EXPECT_EQ(s.allocation.all.freed, 1);
  EXPECT_EQ(s.requested_bytes.all.allocated, static_cast<std::int64_t>(128 * kKiB - 100));
  EXPECT_EQ(s.num_device_alloc, 1);
  a.deallocate(q);
  s = a.stats();
  EXPECT_EQ(s.requested_bytes.all.current, 0);
  EXPECT_EQ(s.requested_bytes.all.freed, static_cast<std::int64_t>(128 * kKiB - 100));
  EXPECT_EQ(rec.count(EventKind::kAlloc), 2);
  EXPECT_EQ(rec.count(EventKind::kFree), 2);
  a.set_listener(nullptr);
  EXPECT_NE(a.describe().find("thread cache 4.00 MiB per thread"), std::string::npos)
      << a.describe();
}

TEST_P(ThreadCache, DoubleFreeOfAParkedBlockIsRejectedAndChangesNothing) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam()));
  void* p = a.allocate(100 * kKiB);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), InvalidInput);
  EXPECT_THROW(a.record_stream(p, 3), InvalidInput);
  void* q = a.allocate(100 * kKiB);
  EXPECT_EQ(p, q);
  void* r = a.allocate(100 * kKiB);  // the cache held one block: this one is new
  EXPECT_NE(q, r);
  a.deallocate(q);
  a.deallocate(r);
  EXPECT_EQ(a.stats().allocation.all.current, 0);
}

TEST_P(ThreadCache, AnotherThreadMayFreeAndItIsNotParkedThere) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam()));
  void* p = a.allocate(64 * kKiB);
  a.deallocate(p);
  void* q = a.allocate(64 * kKiB);  // from this thread's cache
  ASSERT_EQ(p, q);
  std::thread([&] { a.deallocate(q); }).join();  // settled with this thread's cache
  EXPECT_THROW(a.deallocate(q), InvalidInput) << "already freed by the other thread";
  Stats s = a.stats();
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.allocated, s.allocation.all.freed);
}

TEST_P(ThreadCache, ParkedBlocksOfAnExitedThreadComeBackOnTrim) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam()));
  std::thread([&] {
    std::vector<void*> v;
    for (int i = 0; i < 6; ++i) v.push_back(a.allocate(128 * kKiB));
    for (void* p : v) a.deallocate(p);  // all parked in this thread's cache
  }).join();
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0);
  EXPECT_GT(a.stats().reserved_bytes.all.current, 0);
  a.trim();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0) << "parked blocks went back and were freed";
  // Threads that come and go adopt the caches of exited threads.
  for (int i = 0; i < 20; ++i) std::thread([&] { a.deallocate(a.allocate(64 * kKiB)); }).join();
  a.trim();
  Stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
}

TEST_P(ThreadCache, RecordStreamTakesTheBlockOutOfTheCache) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam()));
  void* p = a.allocate(64 * kKiB);
  a.record_stream(p, 5);
  a.deallocate(p);  // pending on stream 5, not parked
  EXPECT_EQ(a.stats().active_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  void* q = a.allocate(64 * kKiB);
  EXPECT_NE(p, q);
  a.synchronize();
  EXPECT_EQ(a.stats().active_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  a.deallocate(q);
  EXPECT_EQ(a.stats().active_bytes.all.current, 0);
}

TEST_P(ThreadCache, CacheIsBoundedPerThreadAndOnlySmallBlocksAreParked) {
  CachingAllocator a(device::make_host_device(), with_cache(GetParam(), 1 * kMiB));
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(a.allocate(256 * kKiB));
  for (void* p : v) a.deallocate(p);  // 4 parked (1 MiB), 4 back in the pool
  // The pool merged the four it got back; the parked ones are still separate blocks.
  EXPECT_EQ(a.stats().inactive_split.all.current, 1);
  void* big = a.allocate(2 * kMiB);  // large pool: never parked
  a.deallocate(big);
  a.trim();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
}

TEST_P(ThreadCache, OutOfMemoryTakesParkedBlocksBackFirst) {
  CachingAllocator a(device::make_limited_device(device::make_host_device(), 4 * kMiB),
                     with_cache(GetParam()));
  std::vector<void*> v;
  for (int i = 0; i < 4; ++i) v.push_back(a.allocate(512 * kKiB));  // one 2 MiB segment
  std::thread([&] {
    for (void* p : v) a.deallocate(p);  // freed by another thread: back in the pool
  }).join();
  v.clear();
  for (int i = 0; i < 8; ++i) v.push_back(a.allocate(512 * kKiB));  // two segments: full
  for (void* p : v) a.deallocate(p);                                // all 8 parked here (4 MiB cap)
  Stats before = a.stats();
  EXPECT_EQ(before.reserved_bytes.all.current, static_cast<std::int64_t>(4 * kMiB));
  // Another size class on another thread: the device is full, only parked blocks can help.
  std::thread([&] {
    void* p = a.allocate(1 * kMiB);
    a.deallocate(p);
  }).join();
  Stats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
}

INSTANTIATE_TEST_SUITE_P(Protocols, ThreadCache, ::testing::Values(true, false),
                         [](const auto& info) {
                           return std::string(info.param ? "membarrier" : "atomic");
                         });

TEST(CachingPool, OomLadderFreesTheSmallestCoveringOversizeBlockFirst) {
  CachingOptions o;
  o.max_split_size = 30 * kMiB;
  CachingAllocator a(device::make_limited_device(device::make_host_device(), 100 * kMiB), o);
  void* small = a.allocate(5 * kMiB);  // 20 MiB segment, split
  void* big = a.allocate(60 * kMiB);   // oversize, too large to give to 32 MiB
  a.deallocate(small);
  a.deallocate(big);
  // 80 MiB reserved, 20 MiB left: 32 MiB needs a new segment. Rung one frees the oversize
  // block, not the 20 MiB segment; rung two is not needed.
  void* p = a.allocate(32 * kMiB);
  Stats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>((20 + 32) * kMiB));
  a.deallocate(p);
}

TEST(CachingPool, OomLadderFreesTheLargestOversizeBlocksUntilEnough) {
  CachingOptions o;
  o.max_split_size = 30 * kMiB;
  CachingAllocator a(device::make_limited_device(device::make_host_device(), 100 * kMiB), o);
  void* small = a.allocate(5 * kMiB);  // 20 MiB segment
  void* big1 = a.allocate(40 * kMiB);
  void* big2 = a.allocate(34 * kMiB);
  for (void* x : {small, big1, big2}) a.deallocate(x);
  // 94 MiB reserved: 50 MiB needs both oversize blocks back (40 + 34), not the 20 MiB segment.
  void* p = a.allocate(50 * kMiB);
  Stats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>((20 + 50) * kMiB));
  a.deallocate(p);
}

// With cache_decay_ms above 0, a free that empties a segment while the cache exceeds both what is
// allocated and 64 MiB gives cached segments back at once, the longest free first, until it does
// not; with 0 (PyTorch's behaviour) they stay.
TEST(CachingPool, AFreeThatLeavesMostOfTheCacheUnusedGivesItsSegmentBack) {
  for (const std::size_t decay_ms : {std::size_t{10000}, std::size_t{0}}) {
    CachingOptions o;
    o.decay_ms = decay_ms;
    CachingAllocator a(device::make_host_device(), o);
    void* keep = a.allocate(70 * kMiB);
    void* p = a.allocate(70 * kMiB);
    a.deallocate(p);  // cache 70 MiB, allocated 70 MiB: not larger, so it stays
    EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(140 * kMiB));
    a.deallocate(keep);  // cache 140 MiB, allocated 0: p's segment, then (70 > 64) keep's go back
    EXPECT_EQ(a.stats().reserved_bytes.all.current,
              static_cast<std::int64_t>((decay_ms != 0 ? 0 : 140) * kMiB))
        << "cache_decay_ms " << decay_ms;
  }
}

// The stale cache goes first: a segment that a loop empties and fills again every period stays
// cached (no device call, no page faulted in again), where giving back the segment just emptied
// made every period map it anew (vLLM's prefill step: 1536 faults each at 32 sequences).
TEST(CachingPool, ASegmentEmptiedEveryPeriodStaysWhileStaleCacheGoesBack) {
  CachingOptions o;
  o.decay_ms = 10000;
  CachingAllocator a(device::make_host_device(), o);
  void* live = a.allocate(30 * kMiB);      // held throughout (the KV cache)
  void* loading = a.allocate(100 * kMiB);  // a buffer of the start-up
  void* stale = a.allocate(70 * kMiB);
  a.deallocate(stale);    // cache 70 MiB, allocated 130: kept
  a.deallocate(loading);  // cache 170, allocated 30: the stale 70 goes first, then the 100
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(30 * kMiB));
  const auto maps = a.stats().num_device_alloc;
  for (int period = 0; period < 5; ++period) {  // the prefill's blocks, freed each period
    void* p = a.allocate(4 * kMiB);
    void* q = a.allocate(700 * 1024);
    a.deallocate(p);
    a.deallocate(q);
  }
  EXPECT_LE(a.stats().num_device_alloc, maps + 2) << "the period's segments are mapped once";
  EXPECT_EQ(a.stats().num_device_free, 2);
  a.deallocate(live);
}

}  // namespace
}  // namespace modelmem::alloc

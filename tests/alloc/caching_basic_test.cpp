#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <cstring>
#include <string>
#include <vector>

#include "event_recorder.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "support/faulty_device.hpp"

namespace modelmem::alloc {
namespace {

using Recorder = modelmem::testing::EventRecorder;

device::DevicePtr limited(std::size_t capacity) {
  return device::make_limited_device(device::make_host_device(), capacity);
}

TEST(CachingPool, RoundsTo512AndPicksThePool) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 512);
  EXPECT_EQ(s.requested_bytes.all.current, 1);
  EXPECT_EQ(s.allocated_bytes.small.current, 512);
  EXPECT_EQ(s.reserved_bytes.small.current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.segment.small.current, 1);

  void* q = a.allocate(kMiB + 1);  // large pool, 20 MiB segment
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.large.current, static_cast<std::int64_t>(kMiB + 512));
  EXPECT_EQ(s.reserved_bytes.large.current, static_cast<std::int64_t>(20 * kMiB));

  void* r = a.allocate(25 * kMiB + 5);  // >= 10 MiB: own segment rounded to 2 MiB
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes.large.current, static_cast<std::int64_t>(46 * kMiB));
  EXPECT_EQ(s.segment.all.current, 3);
  EXPECT_EQ(s.num_device_alloc, 3);
  EXPECT_EQ(s.allocation.all.current, 3);
  for (void* x : {p, q, r}) a.deallocate(x);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  // The 26 MiB segment is not split for 25 MiB + 512: the rest would be < 1 MiB.
  EXPECT_EQ(s.allocated_bytes.all.peak, static_cast<std::int64_t>(512 + kMiB + 512 + 26 * kMiB));
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(48 * kMiB)) << "cached";
  EXPECT_EQ(s.largest_free_block, 26 * kMiB);
}

TEST(CachingPool, ReusesCachedBlocksWithoutTheDevice) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(300 * kKiB);
  a.deallocate(p);
  void* q = a.allocate(300 * kKiB);
  EXPECT_EQ(p, q);
  EXPECT_EQ(a.stats().num_device_alloc, 1);
  a.deallocate(q);
}

TEST(CachingPool, SplitsAndMerges) {
  CachingAllocator a(device::make_host_device());
  void* x = a.allocate(100 * kKiB);
  void* y = a.allocate(100 * kKiB);
  void* z = a.allocate(100 * kKiB);
  EXPECT_EQ(static_cast<char*>(y) - static_cast<char*>(x), static_cast<std::ptrdiff_t>(100 * kKiB));
  a.deallocate(y);
  Stats s = a.stats();
  EXPECT_EQ(s.inactive_split.small.current, 2);  // the hole and the tail
  EXPECT_EQ(s.inactive_split_bytes.small.current, static_cast<std::int64_t>(2 * kMiB - 200 * kKiB));
  void* w = a.allocate(60 * kKiB);  // best fit: the 100 KiB hole, not the tail
  EXPECT_EQ(w, y);
  a.deallocate(w);
  a.deallocate(x);
  a.deallocate(z);
  s = a.stats();
  EXPECT_EQ(s.inactive_split.all.current, 0);
  EXPECT_EQ(s.inactive_split_bytes.all.current, 0);
  EXPECT_EQ(s.largest_free_block, 2 * kMiB) << "all merged back into one block";
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
}

TEST(CachingPool, LargeBlocksSplitOnlyAboveTheSmallSize) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(19 * kMiB + 512 * kKiB);  // remainder 512 KiB <= 1 MiB: not split
  EXPECT_EQ(a.stats().allocated_bytes.all.current, static_cast<std::int64_t>(20 * kMiB));
  a.deallocate(p);
  void* q = a.allocate(18 * kMiB);  // remainder 2 MiB: split
  EXPECT_EQ(a.stats().allocated_bytes.all.current, static_cast<std::int64_t>(18 * kMiB));
  a.deallocate(q);
}

TEST(CachingPool, BadPointersAreRejectedAndChangeNothing) {
  CachingAllocator a(device::make_host_device());
  EXPECT_THROW(a.allocate(0), InvalidInput);
  void* p = a.allocate(4096);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), InvalidInput);
  EXPECT_THROW(a.deallocate(static_cast<char*>(p) + 512), InvalidInput);
  a.deallocate(p);
  Stats before = a.stats();
  try {
    a.deallocate(p);
    FAIL() << "double free accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("already freed"), std::string::npos) << e.what();
  }
  Stats after = a.stats();
  EXPECT_EQ(after.allocation.all.freed, before.allocation.all.freed);
  EXPECT_EQ(after.inactive_split.all.current, before.inactive_split.all.current);
  void* q = a.allocate(4096);
  void* r = a.allocate(4096);
  EXPECT_NE(q, r);
  a.deallocate(q);
  a.deallocate(r);
  EXPECT_THROW(a.record_stream(&local, 1), InvalidInput);
  EXPECT_THROW(a.allocate(std::size_t(-1)), Error);
}

TEST(CachingPool, StreamsDoNotShareFreedBlocks) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(4096, 1);
  a.deallocate(p);
  void* q = a.allocate(4096, 2);
  EXPECT_NE(p, q);
  EXPECT_EQ(a.stats().segment.all.current, 2);
  void* r = a.allocate(4096, 1);
  EXPECT_EQ(p, r);
  a.deallocate(q);
  a.deallocate(r);
}

TEST(CachingPool, RecordStreamHoldsTheBlockUntilSynchronize) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(64 * kKiB, 0);
  a.record_stream(p, 7);
  a.deallocate(p);
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.active_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(s.active.all.current, 1);
  void* q = a.allocate(64 * kKiB, 0);
  EXPECT_NE(p, q) << "reused while stream 7 may still use it";
  a.synchronize();
  EXPECT_EQ(a.stats().active_bytes.all.current, static_cast<std::int64_t>(64 * kKiB));
  a.deallocate(q);
  void* r = a.allocate(64 * kKiB, 0);
  EXPECT_TRUE(r == p || r == q);
  a.deallocate(r);
  EXPECT_EQ(a.stats().active_bytes.all.current, 0);
}

TEST(CachingPool, MaxSplitSizeKeepsOversizeBlocksWhole) {
  CachingOptions o;
  o.max_split_size = 30 * kMiB;
  CachingAllocator a(device::make_host_device(), o);
  void* big = a.allocate(40 * kMiB);
  a.deallocate(big);
  void* small_req = a.allocate(12 * kMiB);  // may not take the oversize cached block
  EXPECT_NE(small_req, big);
  EXPECT_EQ(a.stats().num_device_alloc, 2);
  void* again = a.allocate(40 * kMiB);
  EXPECT_EQ(again, big);
  a.deallocate(again);
  void* huge = a.allocate(64 * kMiB);  // 40 MiB block too small; new segment
  a.deallocate(huge);
  void* mid = a.allocate(38 * kMiB);  // fits the 40 MiB oversize block, not the 64 MiB one
  EXPECT_EQ(mid, big);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, static_cast<std::int64_t>(12 * kMiB + 40 * kMiB))
      << "oversize blocks are not split";
  a.deallocate(mid);
  a.deallocate(small_req);
}

TEST(CachingPool, RoundupPower2Divisions) {
  CachingOptions o;
  o.roundup_power2_divisions = {{0, 4}, {64 * kMiB, 8}};
  CachingAllocator a(device::make_host_device(), o);
  void* p = a.allocate(1200 * kKiB);  // [1, 2) MiB in 4 steps of 256 KiB -> 1280 KiB
  EXPECT_EQ(a.stats().allocated_bytes.all.current, static_cast<std::int64_t>(1280 * kKiB));
  void* q = a.allocate(65 * kMiB);  // [64, 128) MiB in 8 steps of 8 MiB -> 72 MiB
  EXPECT_EQ(a.stats().allocated_bytes.all.current,
            static_cast<std::int64_t>(1280 * kKiB + 72 * kMiB));
  void* r = a.allocate(2 * kMiB);  // a power of two stays
  EXPECT_EQ(a.stats().allocated_bytes.all.current,
            static_cast<std::int64_t>(1280 * kKiB + 74 * kMiB));
  for (void* x : {p, q, r}) a.deallocate(x);
  CachingOptions bad;
  bad.roundup_power2_divisions = {{0, 3}};
  EXPECT_THROW(CachingAllocator(device::make_host_device(), bad), InvalidInput);
}

TEST(CachingPool, OomLadderReleasesCachedSegmentsAndRetries) {
  CachingAllocator a(limited(44 * kMiB));
  void* p = a.allocate(15 * kMiB);  // 16 MiB segment
  a.deallocate(p);                  // cached
  void* q = a.allocate(30 * kMiB);  // device has 28 MiB left: release the cache, retry
  Stats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(30 * kMiB));
  a.deallocate(q);
}

TEST(CachingPool, OutOfMemoryCarriesTheNumbers) {
  CachingAllocator a(limited(40 * kMiB));
  Recorder rec;
  a.set_listener(&rec);
  void* p = a.allocate(30 * kMiB);
  try {
    a.allocate(20 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().requested, 20 * kMiB);
    EXPECT_EQ(e.info().device_free, 10 * kMiB);
    EXPECT_EQ(e.info().reserved, 30 * kMiB);
    EXPECT_EQ(e.info().allocated, 30 * kMiB);
    EXPECT_EQ(e.info().largest_free_block, 0u);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("caching pool on limited:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 20.00 MiB"), std::string::npos) << msg;
  }
  Stats s = a.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(rec.count(EventKind::kOom), 1);
  a.set_listener(nullptr);
  a.deallocate(p);
  void* q = a.allocate(20 * kMiB);  // the pool still works
  a.deallocate(q);
}

TEST(CachingPool, PerProcessMemoryFractionCapsReserved) {
  CachingOptions o;
  o.per_process_memory_fraction = 0.5;
  CachingAllocator a(limited(100 * kMiB), o);
  void* p = a.allocate(40 * kMiB);
  try {
    a.allocate(12 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().device_free, 10 * kMiB) << "what the fraction still allows";
    EXPECT_NE(std::string(e.what()).find("per_process_memory_fraction"), std::string::npos);
  }
  void* q = a.allocate(10 * kMiB);
  a.deallocate(p);
  a.deallocate(q);
}

TEST(CachingPool, GarbageCollectionReleasesOldCachedSegments) {
  CachingOptions o;
  o.garbage_collection_threshold = 0.5;
  CachingAllocator a(limited(100 * kMiB), o);
  void* p1 = a.allocate(20 * kMiB);
  void* p2 = a.allocate(24 * kMiB);
  void* p3 = a.allocate(12 * kMiB);
  a.deallocate(p1);  // oldest
  a.deallocate(p2);
  a.deallocate(p3);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(56 * kMiB));
  void* p5 = a.allocate(30 * kMiB);  // 56 > 50 on a miss: collect oldest first until <= 50
  Stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(66 * kMiB));
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.num_alloc_retries, 0);
  a.deallocate(p5);
  void* p4 = a.allocate(24 * kMiB);
  EXPECT_EQ(p4, p2) << "the younger block survived";
  a.deallocate(p4);
}

// cache_decay_ms: a cached segment free for a decay period goes back to the device, found by
// the statistics the monitor reads (no allocation needed); one still in use, or younger, stays.
TEST(CachingPool, CachedMemoryFreeForADecayPeriodGoesBack) {
  using Clock = std::chrono::steady_clock;
  CachingOptions o;
  o.decay_ms = 200;
  CachingAllocator a(device::make_host_device(), o);
  void* keep = a.allocate(24 * kMiB);  // in use all along: never released
  void* p = a.allocate(30 * kMiB);
  const auto freed = Clock::now();
  a.deallocate(p);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(54 * kMiB));
  auto released = freed;
  while (Clock::now() - freed < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (a.stats().reserved_bytes.all.current == static_cast<std::int64_t>(24 * kMiB)) {
      released = Clock::now();
      break;
    }
  }
  ASSERT_NE(released, freed) << "the free segment was not given back within 5 s";
  // Not before a whole period (the coarse clock ticks in a few ms); well within 1.25 periods
  // plus scheduling on a loaded machine.
  EXPECT_GE(released - freed, std::chrono::milliseconds(190));
  Stats s = a.stats();
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.allocated_bytes.all.current, static_cast<std::int64_t>(24 * kMiB));
  a.deallocate(keep);

  // Off (0, the library's default and PyTorch's behaviour): kept however long.
  CachingAllocator b(device::make_host_device());
  b.deallocate(b.allocate(30 * kMiB));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(b.stats().reserved_bytes.all.current, static_cast<std::int64_t>(30 * kMiB));
}

TEST(CachingPool, TrimReturnsCachedSegments) {
  Recorder rec;
  CachingAllocator a(device::make_host_device());
  a.set_listener(&rec);
  void* keep = a.allocate(4096);
  void* p = a.allocate(5 * kMiB);
  void* q = a.allocate(25 * kMiB);
  a.deallocate(p);
  a.deallocate(q);
  a.trim();
  Stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.segment.all.current, 1);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(rec.count(EventKind::kAlloc), 3);
  EXPECT_EQ(rec.count(EventKind::kFree), 2);
  EXPECT_EQ(rec.count(EventKind::kSegmentAlloc), 3);
  EXPECT_EQ(rec.count(EventKind::kSegmentFree), 2);
  EXPECT_EQ(rec.events.front().kind, EventKind::kSegmentAlloc);
  EXPECT_EQ(rec.events[1].kind, EventKind::kAlloc);
  EXPECT_EQ(rec.events[1].address, reinterpret_cast<std::uintptr_t>(keep));
  EXPECT_EQ(rec.events[1].size, 4096u);
  a.set_listener(nullptr);
  a.deallocate(keep);
}

TEST(CachingPool, ResetPeakAndDescribe) {
  CachingAllocator a(device::make_host_device());
  void* p = a.allocate(3 * kMiB);
  a.deallocate(p);
  EXPECT_EQ(a.stats().allocated_bytes.all.peak, static_cast<std::int64_t>(3 * kMiB));
  a.reset_peak();
  EXPECT_EQ(a.stats().allocated_bytes.all.peak, 0);
  EXPECT_EQ(a.stats().reserved_bytes.all.peak, static_cast<std::int64_t>(20 * kMiB));
  const std::string d = a.describe();
  EXPECT_NE(d.find("caching on host:0"), std::string::npos) << d;
  EXPECT_NE(d.find("20.00 MiB segments"), std::string::npos) << d;
  a.add_warning("hello");
  ASSERT_EQ(a.stats().warnings.size(), 1u);
}

TEST(CachingPool, RejectsBadOptions) {
  auto dev = device::make_host_device();
  auto expect_bad = [&](auto change, const char* key) {
    CachingOptions o;
    change(o);
    try {
      CachingAllocator a(dev, o);
      ADD_FAILURE() << key << " accepted";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_bad([](CachingOptions& o) { o.round_bytes = 500; }, "round_bytes");
  expect_bad([](CachingOptions& o) { o.small_segment = 1024; }, "small_segment");
  expect_bad([](CachingOptions& o) { o.max_split_size = 1024; }, "max_split_size");
  expect_bad([](CachingOptions& o) { o.garbage_collection_threshold = 1.5; },
             "garbage_collection_threshold");
  expect_bad([](CachingOptions& o) { o.per_process_memory_fraction = 0; },
             "per_process_memory_fraction");
  expect_bad(
      [](CachingOptions& o) {
        o.expandable_segments = true;
        o.max_split_size = 64 * kMiB;
      },
      "expandable_segments");
  EXPECT_THROW(CachingAllocator(nullptr), InvalidInput);
}

TEST(CachingPool, DestructorReturnsEverything) {
  auto faulty = device::make_faulty_device(device::make_host_device(), nullptr);
  {
    CachingAllocator a(faulty);
    a.allocate(100);
    a.allocate(3 * kMiB);
    void* p = a.allocate(50 * kMiB);
    a.deallocate(p);
    EXPECT_EQ(faulty->outstanding_bytes(),
              static_cast<std::size_t>(a.stats().reserved_bytes.all.current));
  }
  EXPECT_EQ(faulty->outstanding_bytes(), 0u);
  EXPECT_EQ(faulty->bad_calls(), 0u);
}

}  // namespace
}  // namespace modelmem::alloc

#include <gtest/gtest.h>

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

constexpr std::size_t kPage = 2 * kMiB;  // host granularity with huge_pages

using Recorder = modelmem::testing::EventRecorder;

CachingOptions expandable() {
  CachingOptions o;
  o.expandable_segments = true;
  return o;
}

device::DevicePtr huge_host() {
  return device::make_host_device({.huge_pages = true});
}

TEST(Expandable, UnsupportedWithoutVirtualMemory) {
  auto dev = device::make_limited_device(device::make_host_device(), 64 * kMiB, false);
  try {
    CachingAllocator a(dev, expandable());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_EQ(std::string(e.what()),
              "expandable_segments is not supported on limited:0 (no virtual memory)");
  }
}

TEST(Expandable, MapsPagesOnDemandContiguously) {
  CachingOptions o = expandable();
  o.expandable_split_pools = true;  // PyTorch's layout: one range per (stream, pool)
  CachingAllocator a(huge_host(), o);
  auto* p = static_cast<char*>(a.allocate(3 * kMiB));
  Stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.large.current, static_cast<std::int64_t>(4 * kMiB)) << "2 pages";
  EXPECT_EQ(s.segment.large.current, 1);
  auto* q = static_cast<char*>(a.allocate(5 * kMiB));
  EXPECT_EQ(q, p + 3 * kMiB) << "grows in place after the last block";
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes.large.current, static_cast<std::int64_t>(8 * kMiB));
  EXPECT_EQ(s.segment.large.current, 1) << "one range per (stream, pool)";
  std::memset(p, 1, 3 * kMiB);
  std::memset(q, 2, 5 * kMiB);
  void* small = a.allocate(4 * kKiB);  // small pool: its own range
  EXPECT_EQ(a.stats().segment.all.current, 2);
  EXPECT_EQ(a.stats().reserved_bytes.small.current, static_cast<std::int64_t>(kPage));
  a.deallocate(small);
  a.deallocate(p);
  a.deallocate(q);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(10 * kMiB));
  a.trim();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
  EXPECT_GE(a.stats().num_device_free, 2);
}

TEST(Expandable, OneRangePerStreamServesBothSizeClasses) {
  CachingAllocator a(huge_host(), expandable());
  auto* big = static_cast<char*>(a.allocate(3 * kMiB));
  auto* small = static_cast<char*>(a.allocate(64 * kKiB));
  EXPECT_EQ(small, big + 3 * kMiB) << "the small block shares the page after the large one";
  Stats s = a.stats();
  EXPECT_EQ(s.segment.all.current, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(s.allocated_bytes.small.current, static_cast<std::int64_t>(64 * kKiB));
  EXPECT_EQ(s.allocated_bytes.large.current, static_cast<std::int64_t>(3 * kMiB));
  a.deallocate(small);
  a.deallocate(big);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.small.current, 0);
  EXPECT_EQ(s.active_bytes.all.current, 0);
}

TEST(Expandable, GrowthRecyclesFreePagesFirst) {
  CachingAllocator a(huge_host(), expandable());
  void* p = a.allocate(8 * kMiB, 1);
  a.deallocate(p);  // 8 MiB mapped and free on stream 1
  void* q = a.allocate(6 * kMiB, 2);
  Stats s = a.stats();
  EXPECT_EQ(s.reserved_bytes.all.peak, static_cast<std::int64_t>(8 * kMiB))
      << "stream 2's pages came from stream 1's cache, not on top of it";
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(6 * kMiB));
  EXPECT_EQ(s.num_alloc_retries, 0);
  a.deallocate(q);
  CachingOptions pytorch = expandable();
  pytorch.expandable_recycle = false;
  CachingAllocator b(huge_host(), pytorch);
  b.deallocate(b.allocate(8 * kMiB, 1));
  b.deallocate(b.allocate(6 * kMiB, 2));
  EXPECT_EQ(b.stats().reserved_bytes.all.peak, static_cast<std::int64_t>(14 * kMiB));
}

TEST(Expandable, TrimUnmapsOnlyWholeFreePages) {
  CachingAllocator a(huge_host(), expandable());
  auto* p = static_cast<char*>(a.allocate(3 * kMiB));
  auto* q = static_cast<char*>(a.allocate(6 * kMiB));
  auto* r = static_cast<char*>(a.allocate(1 * kMiB + 512));
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(12 * kMiB));
  a.deallocate(q);  // [3, 9) MiB free: pages [4, 8) are whole
  a.trim();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(8 * kMiB));
  std::memset(p, 3, 3 * kMiB);  // the partial pages stay mapped
  std::memset(r, 4, kMiB + 512);
  auto* again = static_cast<char*>(a.allocate(6 * kMiB));
  EXPECT_EQ(again, q) << "the hole is mapped again at the lowest address";
  std::memset(again, 5, 6 * kMiB);
  EXPECT_EQ(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(12 * kMiB));
  for (void* x : {static_cast<void*>(p), static_cast<void*>(again), static_cast<void*>(r)})
    a.deallocate(x);
}

TEST(Expandable, PartialMapIsRolledBack) {
  // 5 pages of capacity, map calls of one page: a 6-page request maps 5 pages, fails on the
  // sixth, and must give the 5 back.
  auto faulty = device::make_faulty_device(
      device::make_limited_device(huge_host(), 5 * kPage, true), nullptr);
  {
    CachingOptions o = expandable();
    o.expandable_map_chunk = kPage;
    o.expandable_reserve = 64 * kMiB;  // more address space than capacity
    CachingAllocator a(faulty, o);
    EXPECT_THROW(a.allocate(6 * kPage), OutOfMemory);
    EXPECT_EQ(faulty->outstanding_bytes(), 0u);
    Stats s = a.stats();
    EXPECT_EQ(s.reserved_bytes.all.current, 0);
    EXPECT_EQ(s.num_ooms, 1);
    EXPECT_EQ(faulty->calls(device::FaultOp::kMap), 12u) << "5 + 1 failed, twice (retry)";
    void* p = a.allocate(5 * kPage);  // the memory really came back
    EXPECT_EQ(faulty->outstanding_bytes(), 5 * kPage);
    a.deallocate(p);
  }
  EXPECT_EQ(faulty->outstanding_bytes(), 0u);
  EXPECT_EQ(faulty->outstanding_reservations(), 0u);
  EXPECT_EQ(faulty->bad_calls(), 0u);
}

TEST(Expandable, OomLadderUnmapsOtherStreamsFreePages) {
  auto dev = device::make_limited_device(huge_host(), 16 * kMiB, true);
  CachingOptions o = expandable();
  o.expandable_recycle = false;  // else growth recycles before the device runs out
  CachingAllocator a(dev, o);
  void* p = a.allocate(12 * kMiB, 1);
  a.deallocate(p);  // 12 MiB mapped and free on stream 1
  void* q = a.allocate(10 * kMiB, 2);
  Stats s = a.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(10 * kMiB));
  a.deallocate(q);
}

TEST(Expandable, AddressSpaceBeyondTheDeviceServesScatteredBlocks) {
  // A 16 MiB device filled with 2 MiB blocks, every other one freed: 8 MiB is free, in holes of
  // 2 MiB. A 6 MiB request needs a 6 MiB stretch of addresses: a range of 16 MiB has none, so
  // the memory is there and the request fails; the default range (twice the device) maps it
  // after the last block.
  auto run = [](std::size_t reserve) {
    auto dev = device::make_limited_device(huge_host(), 16 * kMiB, true);
    CachingOptions o = expandable();
    o.expandable_reserve = reserve;
    CachingAllocator a(dev, o);
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(kPage));
    for (int i = 0; i < 8; i += 2) a.deallocate(blocks[i]);
    bool served = true;
    try {
      void* big = a.allocate(6 * kMiB);
      std::memset(big, 1, 6 * kMiB);
      EXPECT_LE(a.stats().reserved_bytes.all.current, static_cast<std::int64_t>(16 * kMiB));
      a.deallocate(big);
    } catch (const OutOfMemory&) {
      served = false;
    }
    for (int i = 1; i < 8; i += 2) a.deallocate(blocks[i]);
    return served;
  };
  EXPECT_FALSE(run(16 * kMiB)) << "one device of addresses: the holes are 2 MiB each";
  EXPECT_TRUE(run(0)) << "the default reserves twice the device";
}

TEST(Expandable, EventsForMapAndUnmap) {
  Recorder rec;
  CachingAllocator a(huge_host(), expandable());
  a.set_listener(&rec);
  void* p = a.allocate(3 * kMiB);
  a.deallocate(p);
  a.trim();
  a.set_listener(nullptr);
  ASSERT_EQ(rec.events.size(), 4u);
  EXPECT_EQ(rec.events[0].kind, EventKind::kMap);
  EXPECT_EQ(rec.events[0].size, 4 * kMiB);
  EXPECT_EQ(rec.events[1].kind, EventKind::kAlloc);
  EXPECT_EQ(rec.events[1].size, 3 * kMiB);
  EXPECT_EQ(rec.events[2].kind, EventKind::kFree);
  EXPECT_EQ(rec.events[3].kind, EventKind::kUnmap);
  EXPECT_EQ(rec.events[3].size, 4 * kMiB);
  EXPECT_EQ(rec.events[3].address, rec.events[0].address);
}

TEST(Expandable, FitsExactlyWhereFixedSegmentsFragment) {
  // Alternating 11 MiB and 3 MiB blocks, then the 3 MiB ones freed and 6 MiB asked: fixed
  // segments cannot reuse the 3 MiB holes, expandable segments reuse them after unmapping.
  auto run = [](bool exp) {
    CachingOptions o;
    o.expandable_segments = exp;
    CachingAllocator a(device::make_host_device({.huge_pages = true}), o);
    std::vector<void*> keep, drop;
    for (int i = 0; i < 4; ++i) {
      keep.push_back(a.allocate(11 * kMiB));
      drop.push_back(a.allocate(3 * kMiB));
    }
    for (void* d : drop) a.deallocate(d);
    a.trim();
    void* big = a.allocate(6 * kMiB);
    const auto reserved = a.stats().reserved_bytes.all.current;
    a.deallocate(big);
    for (void* k : keep) a.deallocate(k);
    return reserved;
  };
  EXPECT_LT(run(true), run(false));
}

TEST(Expandable, DescribeSaysSo) {
  CachingAllocator a(huge_host(), expandable());
  EXPECT_NE(a.describe().find("expandable segments (page 2.00 MiB)"), std::string::npos)
      << a.describe();
}

}  // namespace
}  // namespace modelmem::alloc

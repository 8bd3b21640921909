#include "modelmem/alloc/static_allocator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "event_recorder.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "static_test_device.hpp"

namespace modelmem::alloc {
namespace {

using modelmem::testing::CountingDevice;

using Recorder = modelmem::testing::EventRecorder;

TEST(StaticArena, TakesItsBudgetOnceAndGivesItBack) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  {
    StaticAllocator a(dev, {8 * kMiB, 256});
    EXPECT_EQ(dev->used(), 8 * kMiB);
    std::vector<void*> ptrs;
    for (int i = 0; i < 100; ++i) ptrs.push_back(a.allocate(1000 + i * 7));
    for (void* p : ptrs) a.deallocate(p);
    for (int i = 0; i < 100; ++i) a.deallocate(a.allocate(50 * kKiB));
    EXPECT_EQ(dev->allocs(), 1);  // never asks the device again
    Stats s = a.stats();
    EXPECT_EQ(s.num_device_alloc, 1);
    EXPECT_EQ(s.reserved_bytes.all.current, static_cast<std::int64_t>(8 * kMiB));
    EXPECT_EQ(s.segment.all.current, 1);
  }
  EXPECT_EQ(dev->used(), 0u);
  EXPECT_EQ(dev->bad_frees(), 0);
}

TEST(StaticArena, AlignsAndRoundsBlocks) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  StaticAllocator a(dev, {1 * kMiB, 512});
  void* p = a.allocate(1);
  void* q = a.allocate(513);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 512, 0u);
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 512 + 1024);
  EXPECT_EQ(s.requested_bytes.all.current, 1 + 513);
  EXPECT_EQ(s.allocation.all.current, 2);
  EXPECT_EQ(s.allocation.small.current, 2);
  EXPECT_EQ(s.active_bytes.all.current, 512 + 1024);
  a.deallocate(p);
  a.deallocate(q);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.allocated_bytes.all.peak, 512 + 1024);
  EXPECT_EQ(s.allocated_bytes.all.freed, 512 + 1024);
  EXPECT_EQ(s.allocation.all.allocated, 2);
}

TEST(StaticArena, ExhaustionThrowsOutOfMemoryWithTheNumbers) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {4 * kMiB, 256});
  Recorder rec;
  a.set_listener(&rec);
  void* p = a.allocate(3 * kMiB);
  try {
    a.allocate(2 * kMiB);
    FAIL() << "no OutOfMemory";
  } catch (const OutOfMemory& e) {
    const OomInfo& i = e.info();
    EXPECT_EQ(i.requested, 2 * kMiB);
    EXPECT_EQ(i.reserved, 4 * kMiB);
    EXPECT_EQ(i.allocated, 3 * kMiB);
    EXPECT_EQ(i.largest_free_block, 1 * kMiB);
    EXPECT_EQ(i.device_free, 12 * kMiB);
    EXPECT_FALSE(i.quota.has_value());
    std::string msg = e.what();
    EXPECT_NE(msg.find("static pool on counting:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested 2.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest free block 1.00 MiB"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.stats().num_ooms, 1);
  a.deallocate(p);
  a.set_listener(nullptr);
  // The arena it holds is told as a segment when the listener arrives; then the blocks.
  EXPECT_EQ(rec.count(EventKind::kSegmentAlloc), 1);
  const std::vector<Event> blocks = rec.blocks();
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].kind, EventKind::kAlloc);
  EXPECT_EQ(blocks[0].size, 3 * kMiB);
  EXPECT_EQ(blocks[1].kind, EventKind::kOom);
  EXPECT_EQ(blocks[1].size, 2 * kMiB);
  EXPECT_EQ(blocks[2].kind, EventKind::kFree);
  EXPECT_EQ(blocks[2].address, reinterpret_cast<std::uintptr_t>(p));
  // Requests larger than the whole pool (even absurd ones) are OOM, not overflow.
  EXPECT_THROW(a.allocate(SIZE_MAX), OutOfMemory);
  EXPECT_THROW(a.allocate(4 * kMiB + 1), OutOfMemory);
  EXPECT_NO_THROW(a.deallocate(a.allocate(4 * kMiB)));
}

TEST(StaticArena, FragmentationIsVisibleInTheOomReport) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {1 * kMiB, 256});
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(a.allocate(64 * kKiB));
  for (int i = 0; i < 16; i += 2) a.deallocate(blocks[i]);  // 8 holes of 64 KiB
  Stats s = a.stats();
  EXPECT_EQ(s.largest_free_block, 64 * kKiB);
  EXPECT_EQ(s.inactive_split_bytes.all.current, static_cast<std::int64_t>(512 * kKiB));
  EXPECT_EQ(s.inactive_split.all.current, 8);
  EXPECT_NEAR(s.fragmentation(), 1.0 - 64.0 / 512.0, 1e-9);
  try {
    a.allocate(128 * kKiB);
    FAIL();
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().largest_free_block, 64 * kKiB);
    EXPECT_EQ(e.info().allocated, 512 * kKiB);
  }
  for (int i = 1; i < 16; i += 2) a.deallocate(blocks[i]);
  s = a.stats();
  EXPECT_EQ(s.largest_free_block, 1 * kMiB);  // everything merged back into one block
  EXPECT_EQ(s.inactive_split_bytes.all.current, 0);
  EXPECT_EQ(s.inactive_split.all.current, 0);
}

TEST(StaticArena, CoalescesWithBothNeighbours) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {3 * kMiB, 256});
  void* x = a.allocate(1 * kMiB);
  void* y = a.allocate(1 * kMiB);
  void* z = a.allocate(1 * kMiB);
  a.deallocate(x);
  a.deallocate(z);
  EXPECT_EQ(a.stats().largest_free_block, 1 * kMiB);
  a.deallocate(y);
  EXPECT_EQ(a.stats().largest_free_block, 3 * kMiB);
  void* all = a.allocate(3 * kMiB);
  EXPECT_EQ(all, x);
  a.deallocate(all);
}

TEST(StaticArena, BestFitPicksTheSmallestHoleThatFits) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {1 * kMiB, 256});
  void* big_hole = a.allocate(300 * kKiB);
  void* sep1 = a.allocate(1 * kKiB);
  void* small_hole = a.allocate(100 * kKiB);
  void* sep2 = a.allocate(1 * kKiB);
  a.deallocate(big_hole);
  a.deallocate(small_hole);
  void* p = a.allocate(90 * kKiB);
  EXPECT_EQ(p, small_hole);
  void* q = a.allocate(200 * kKiB);
  EXPECT_EQ(q, big_hole);
  for (void* b : {p, q, sep1, sep2}) a.deallocate(b);
}

TEST(StaticArena, DoubleFreeAndForeignPointersAreInvalidInput) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {1 * kMiB, 256});
  void* p = a.allocate(1000);
  void* q = a.allocate(1000);
  a.deallocate(p);
  Stats before = a.stats();
  try {
    a.deallocate(p);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("double free"), std::string::npos) << e.what();
  }
  int local = 0;
  try {
    a.deallocate(&local);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("did not hand out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.deallocate(static_cast<char*>(q) + 256), InvalidInput);  // inside a block
  Stats after = a.stats();
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.largest_free_block, before.largest_free_block);
  a.deallocate(q);
  a.deallocate(nullptr);  // like free(nullptr)
}

TEST(StaticArena, RejectsBadOptionsAndZeroSizes) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  EXPECT_THROW(StaticAllocator(dev, {0, 256}), InvalidInput);
  EXPECT_THROW(StaticAllocator(dev, {kMiB, 0}), InvalidInput);
  EXPECT_THROW(StaticAllocator(dev, {kMiB, 384}), InvalidInput);
  EXPECT_THROW(StaticAllocator(dev, {100, 256}), InvalidInput);
  EXPECT_THROW(StaticAllocator(nullptr, {kMiB, 256}), InvalidInput);
  EXPECT_THROW(StaticAllocator(dev, {32 * kMiB, 256}), OutOfMemory);  // device too small
  EXPECT_EQ(dev->used(), 0u);
  StaticAllocator a(dev, {kMiB, 256});
  EXPECT_THROW(a.allocate(0), InvalidInput);
  EXPECT_NE(a.describe().find("static"), std::string::npos);
}

TEST(StaticArena, ResetPeak) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {kMiB, 256});
  void* p = a.allocate(100 * kKiB);
  a.deallocate(a.allocate(200 * kKiB));
  EXPECT_EQ(a.stats().allocated_bytes.all.peak, static_cast<std::int64_t>(300 * kKiB));
  a.reset_peak();
  EXPECT_EQ(a.stats().allocated_bytes.all.peak, static_cast<std::int64_t>(100 * kKiB));
  a.deallocate(p);
}

// Every live block carries its own byte pattern; after every step all patterns must be intact
// and no two live blocks may overlap: a block handed out twice would break one of them.
TEST(StaticArena, RandomPatternsNoBlockHandedOutTwice) {
  auto dev = std::make_shared<CountingDevice>(16 * kMiB);
  StaticAllocator a(dev, {2 * kMiB, 256});
  std::mt19937_64 rng(1234);
  struct Block {
    unsigned char* p;
    std::size_t n;
    unsigned char tag;
  };
  std::vector<Block> live;
  std::size_t ooms = 0;
  for (int step = 0; step < 3000; ++step) {
    bool do_alloc = live.empty() || (rng() % 100) < 55;
    if (do_alloc) {
      std::size_t n = 1 + rng() % (rng() % 4 == 0 ? 256 * kKiB : 4 * kKiB);
      try {
        auto* p = static_cast<unsigned char*>(a.allocate(n));
        unsigned char tag = static_cast<unsigned char>(step * 31 + 7);
        std::memset(p, tag, n);
        live.push_back({p, n, tag});
      } catch (const OutOfMemory&) {
        ++ooms;
      }
    } else {
      std::size_t i = rng() % live.size();
      a.deallocate(live[i].p);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 10 == 0 || step > 2900) {
      std::map<std::uintptr_t, std::size_t> ranges;
      for (const Block& b : live) {
        ASSERT_TRUE(std::all_of(b.p, b.p + b.n, [&](unsigned char c) { return c == b.tag; }))
            << "pattern overwritten at step " << step;
        ranges[reinterpret_cast<std::uintptr_t>(b.p)] = b.n;
      }
      std::uintptr_t end = 0;
      for (auto [start, n] : ranges) {
        ASSERT_GE(start, end) << "overlapping blocks at step " << step;
        end = start + n;
      }
    }
  }
  EXPECT_GT(ooms, 0u);  // the arena was really driven to exhaustion
  for (const Block& b : live) a.deallocate(b.p);
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.largest_free_block, 2 * kMiB);
}

TEST(StaticArena, ThreadsNeverShareABlock) {
  auto dev = std::make_shared<CountingDevice>(64 * kMiB);
  StaticAllocator a(dev, {16 * kMiB, 256});
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<unsigned char*, std::size_t>> mine;
      for (int i = 0; i < 4000; ++i) {
        if (mine.empty() || rng() % 2) {
          std::size_t n = 1 + rng() % 8192;
          try {
            auto* p = static_cast<unsigned char*>(a.allocate(n));
            std::memset(p, t + 1, n);
            mine.emplace_back(p, n);
          } catch (const OutOfMemory&) {
          }
        } else {
          auto [p, n] = mine.back();
          mine.pop_back();
          if (!std::all_of(p, p + n, [&](unsigned char c) { return c == t + 1; })) ++failures;
          a.deallocate(p);
        }
      }
      for (auto [p, n] : mine) a.deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0);
  EXPECT_EQ(a.stats().largest_free_block, 16 * kMiB);
}

TEST(SystemStrategy, CountsAndChecksLikeTheOthers) {
  SystemAllocator a;
  Recorder rec;
  a.set_listener(&rec);
  void* p = a.allocate(100);
  void* q = a.allocate(2 * kMiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 64, 0u);
  std::memset(q, 1, 2 * kMiB);
  Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, static_cast<std::int64_t>(128 + 2 * kMiB));
  EXPECT_EQ(s.allocated_bytes.small.current, 128);
  EXPECT_EQ(s.allocated_bytes.large.current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.requested_bytes.all.current, static_cast<std::int64_t>(100 + 2 * kMiB));
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), InvalidInput);
  EXPECT_THROW(a.allocate(0), InvalidInput);
  a.deallocate(q);
  a.set_listener(nullptr);
  EXPECT_EQ(rec.blocks().size(), 4u);
  // Each block is its own segment, told as one.
  EXPECT_EQ(rec.count(EventKind::kSegmentAlloc), 2);
  EXPECT_EQ(rec.count(EventKind::kSegmentFree), 2);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.allocated, 2);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_THROW(SystemAllocator(SystemOptions{48}), InvalidInput);
}

}  // namespace
}  // namespace modelmem::alloc

// The LD_PRELOAD library's per-thread cache of small blocks (integrations/preload/small_cache.hpp),
// tested directly on blocks of the C library: size classes, alignment, double frees, the budget,
// the sweep of unused blocks and draining.
#include "small_cache.hpp"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

namespace modelmem::preload {
namespace {

constexpr std::uintptr_t kKey = 0x5eed5eed5eed5eedull;

TEST(SmallCacheClasses, CeilIsTheSmallestClassThatHoldsASize) {
  for (int c = 2; c < kCacheClasses; ++c) ASSERT_GT(class_size(c), class_size(c - 1)) << c;
  EXPECT_EQ(class_size(kCacheClasses - 1), kCacheMax);
  for (std::size_t s = 0; s <= kCacheMax; ++s) {
    const int c = class_ceil(s);
    ASSERT_GE(c, 1) << s;
    ASSERT_LT(c, kCacheClasses) << s;
    ASSERT_GE(class_size(c), s) << s;
    if (c > 1) {
      ASSERT_LT(class_size(c - 1), s) << s;
    }
  }
}

TEST(SmallCacheClasses, FloorIsTheLargestClassABlockCanServe) {
  for (std::size_t u = 0; u < kCacheStep; ++u) EXPECT_EQ(class_floor(u), 0) << u;
  for (std::size_t u = kCacheStep; u <= kCacheMax + kCacheMax / 4; ++u) {
    const int c = class_floor(u);
    ASSERT_GE(c, 1) << u;
    ASSERT_LE(class_size(c), u) << u;
    if (c + 1 < kCacheClasses) {
      ASSERT_GT(class_size(c + 1), u) << u;
    }
  }
  EXPECT_EQ(class_floor(kCacheMax + kCacheMax / 4 + 1), 0);  // too large to keep
  EXPECT_EQ(class_floor(std::size_t{1} << 30), 0);
}

TEST(SmallCacheClasses, AClassSizedBlockOfTheCLibraryReturnsToItsClass) {
  // On a miss the cache asks for the whole class size, so the block serves the class again.
  for (int c = 1; c < kCacheClasses; ++c) {
    void* p = std::malloc(class_size(c));
    ASSERT_NE(p, nullptr);
    EXPECT_GE(class_floor(malloc_usable_size(p)), c) << class_size(c);
    std::free(p);
  }
}

struct Cache {
  ThreadCache cache{};
  CacheLimits limits;
  std::vector<void*> released;
  std::vector<void*> spare;
  explicit Cache(std::size_t budget) : limits(cache_limits(budget)) {}
  ~Cache() {
    cache.drain([](void* p) { std::free(p); });
    for (void* p : released) std::free(p);
    for (void* p : spare) std::free(p);
  }
  // A block of the C library at a 64-byte boundary or not, never at a page boundary (those are
  // not cached), whose usable size puts it in the class of `size` (an aligned block may be
  // larger), so that which list it joins is known; the blocks tried on the way are kept aside.
  // nullptr when none turns up (a sanitizer's malloc returns 64-byte aligned blocks only).
  void* block(std::size_t size, bool aligned) {
    for (int tries = 0; tries < 256; ++tries) {
      void* p = aligned ? memalign(kCacheAlign, size) : std::malloc(size);
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      if (a % kPageAlign != 0 && (a % kCacheAlign == 0) == aligned &&
          class_floor(malloc_usable_size(p)) == class_ceil(size))
        return p;
      spare.push_back(p);
    }
    return nullptr;
  }
  ThreadCache::Put put(void* p) {
    return cache.put(p, malloc_usable_size(p), kKey, limits,
                     [this](void* q) { released.push_back(q); });
  }
};

TEST(SmallCache, AFreedBlockServesTheNextRequestOfItsClass) {
  Cache c(1 << 20);
  const int k = class_ceil(100);
  void* p = c.block(class_size(k), true);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(c.put(p), ThreadCache::Put::kept);
  EXPECT_EQ(c.cache.bytes, class_size(k));
  EXPECT_EQ(c.cache.take(k + 1, false), nullptr);  // another class: a miss
  void* q = c.cache.take(k, false);
  EXPECT_EQ(q, p);
  EXPECT_EQ(c.cache.take(k, false), nullptr);  // handed out once only
  EXPECT_EQ(c.cache.hits, 1u);
  EXPECT_EQ(c.cache.misses, 2u);
  EXPECT_EQ(c.cache.bytes, 0u);
  std::free(q);
}

TEST(SmallCache, AlignedRequestsGetAlignedBlocksOnly) {
  Cache c(1 << 20);
  const int k = class_ceil(200);
  void* plain = c.block(class_size(k), false);
  if (plain == nullptr) GTEST_SKIP() << "this malloc returns 64-byte aligned blocks only";
  void* aligned = c.block(class_size(k), true);
  ASSERT_NE(aligned, nullptr);
  ASSERT_EQ(c.put(plain), ThreadCache::Put::kept);
  EXPECT_EQ(c.cache.take(k, true), nullptr);  // only an unaligned block is cached
  ASSERT_EQ(c.put(aligned), ThreadCache::Put::kept);
  EXPECT_EQ(c.cache.take(k, false), plain);  // an unaligned request prefers the unaligned one
  EXPECT_EQ(c.cache.take(k, true), aligned);
  ASSERT_EQ(c.put(aligned), ThreadCache::Put::kept);
  EXPECT_EQ(c.cache.take(k, false), aligned);  // and takes an aligned one when nothing else is left
  std::free(plain);
  std::free(aligned);
}

TEST(SmallCache, ADoubleFreeIsCaughtNotCachedTwice) {
  Cache c(1 << 20);
  void* p = c.block(64, true);
  void* other = c.block(64, true);
  ASSERT_TRUE(p != nullptr && other != nullptr);
  ASSERT_EQ(c.put(p), ThreadCache::Put::kept);
  ASSERT_EQ(c.put(other), ThreadCache::Put::kept);
  const std::size_t bytes = c.cache.bytes;
  EXPECT_EQ(c.put(p), ThreadCache::Put::double_free);
  EXPECT_EQ(c.cache.bytes, bytes);
  // Both blocks come out once each, then nothing.
  const int k = class_floor(malloc_usable_size(p));
  std::set<void*> out;
  for (void* q; (q = c.cache.take(k, false)) != nullptr;) out.insert(q);
  EXPECT_EQ(out, (std::set<void*>{p, other}));
  // A block taken out again is live: its mark is cleared, so freeing it once more is fine.
  EXPECT_EQ(c.put(p), ThreadCache::Put::kept);
  std::free(other);
}

TEST(SmallCache, LeavesPageAlignedBlocksToTheCLibrary) {
  // It reuses the freed spot for the next page-aligned request; cached, the spot would be lost
  // and every such request would cut a new one out of fresh memory.
  Cache c(1 << 20);
  void* page = memalign(kPageAlign, 16);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(page) % kPageAlign, 0u);
  EXPECT_EQ(c.put(page), ThreadCache::Put::full);
  EXPECT_EQ(c.cache.bytes, 0u);
  std::free(page);
}

TEST(SmallCache, ADoubleFreeOnAnotherThreadIsCaughtToo) {
  // The first free put the block in one thread's cache, the second comes on another thread.
  Cache a(1 << 20), b(1 << 20);
  void* p = a.block(64, true);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(a.put(p), ThreadCache::Put::kept);
  EXPECT_EQ(b.put(p), ThreadCache::Put::double_free);
  EXPECT_EQ(b.cache.bytes, 0u);
}

TEST(SmallCache, KeepsNoMoreThanItsBudgetAndItsPerClassLimit) {
  Cache c(64 << 10);
  const int k = class_ceil(1024);  // at most budget/8 = 8 blocks of 1 KiB per list
  int kept = 0, full = 0;
  for (int i = 0; i < 20; ++i) {
    void* p = c.block(class_size(k), true);
    if (c.put(p) == ThreadCache::Put::kept) {
      kept++;
    } else {
      full++;
      c.spare.push_back(p);
    }
  }
  EXPECT_EQ(c.limits.max_blocks[k], 8u);
  EXPECT_EQ(kept, 8);
  EXPECT_EQ(full, 12);
  EXPECT_EQ(c.cache.passed, 12u);
  // Blocks of 4-8 KiB: at least 4 per list (more than budget/8), but the whole budget (64 KiB)
  // caps the total.
  const std::size_t before = c.cache.bytes;
  int refused = 0;
  for (std::size_t size = 4096; size <= 8192; size += 1024)
    for (int i = 0; i < 6; ++i) {
      void* p = c.block(size, true);
      ASSERT_NE(p, nullptr);
      if (c.put(p) != ThreadCache::Put::kept) {
        refused++;
        c.spare.push_back(p);
      }
    }
  EXPECT_GT(c.cache.bytes, before);
  EXPECT_LE(c.cache.bytes, std::size_t{64} << 10);
  EXPECT_GT(c.cache.bytes + 8192, std::size_t{64} << 10);  // filled to the budget
  EXPECT_GT(refused, 0);
}

TEST(SmallCache, ASweepReleasesSizesNoLongerAskedFor) {
  Cache c(4096);
  const int old_class = class_ceil(1024);
  const int new_class = class_ceil(256);
  // The budget fills with four 1 KiB blocks that nobody asks for again.
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(c.put(c.block(class_size(old_class), true)), ThreadCache::Put::kept);
  }
  ASSERT_EQ(c.cache.bytes, 4096u);
  // Then a program that frees 256-byte blocks: once enough frees found the budget spent, two
  // sweeps (the first sets the low-water marks, the second releases the blocks below them)
  // hand the stale blocks back, and the new size is cached.
  int kept = 0;
  for (int i = 0; i < 3 * static_cast<int>(ThreadCache::kSweepEvery); ++i) {
    void* p = c.block(class_size(new_class), true);
    if (c.put(p) == ThreadCache::Put::kept) {
      kept++;
    } else {
      c.spare.push_back(p);
    }
    if (c.cache.sweeps < 2) {
      EXPECT_EQ(kept, 0);
    }
  }
  EXPECT_EQ(c.cache.sweeps, 2u);
  EXPECT_EQ(c.cache.bins[1][old_class].count, 0u);
  EXPECT_EQ(c.released.size(), 4u);
  EXPECT_EQ(kept, static_cast<int>(c.limits.max_blocks[new_class]));
}

TEST(SmallCache, ASweepKeepsTheBlocksUsedMostRecently) {
  Cache c(1 << 20);
  const int k = class_ceil(1024);
  std::vector<void*> b;
  for (int i = 0; i < 4; ++i) {
    b.push_back(c.block(class_size(k), true));
    ASSERT_EQ(c.put(b.back()), ThreadCache::Put::kept);
  }
  auto release = [&](void* p) { c.released.push_back(p); };
  c.cache.sweep(release);  // sets the low-water marks: nothing released yet
  EXPECT_TRUE(c.released.empty());
  // Two blocks are used and come back; the two freed first stay untouched.
  void* x = c.cache.take(k, true);
  void* y = c.cache.take(k, true);
  EXPECT_EQ(x, b[3]);
  EXPECT_EQ(y, b[2]);
  ASSERT_EQ(c.put(y), ThreadCache::Put::kept);
  ASSERT_EQ(c.put(x), ThreadCache::Put::kept);
  c.cache.sweep(release);
  EXPECT_EQ(c.released, (std::vector<void*>{b[1], b[0]}));
  EXPECT_EQ(c.cache.bins[1][k].count, 2u);
  EXPECT_EQ(c.cache.bytes, 2 * class_size(k));
  EXPECT_EQ(c.cache.take(k, true), b[3]);
  EXPECT_EQ(c.cache.take(k, true), b[2]);
  EXPECT_EQ(c.cache.take(k, true), nullptr);
  c.spare.push_back(b[3]);
  c.spare.push_back(b[2]);
}

TEST(SmallCache, BlocksFreedByADrainComeBackUnmarked) {
  // The mark is cleared right before the block is freed: a store the compiler may drop as dead
  // unless it is volatile (it did, at -O2, with free inlined here), and then the C library hands
  // the block out again still marked, and its next free looks like a double free.
  for (int round = 0; round < 3; ++round) {
    ThreadCache cache{};
    const CacheLimits limits = cache_limits(64 << 10);
    std::vector<void*> passed;
    for (int i = 0; i < 60; ++i) {
      void* p = i < 20  ? memalign(kCacheAlign, 1024)
                : i % 2 ? std::malloc(4096)
                        : memalign(kCacheAlign, 4096);
      const auto r =
          cache.put(p, malloc_usable_size(p), kKey, limits, [](void* q) { std::free(q); });
      ASSERT_NE(r, ThreadCache::Put::double_free) << "round " << round << " block " << i;
      if (r != ThreadCache::Put::kept) passed.push_back(p);
    }
    cache.drain([](void* q) { std::free(q); });
    for (void* p : passed) std::free(p);
  }
}

TEST(SmallCache, RandomUseNeverHandsOutALiveBlockAndDrainsEverything) {
  Cache c(256 << 10);
  std::mt19937 rng(5);
  std::set<void*> live;
  std::vector<void*> order;
  for (int i = 0; i < 200000; ++i) {
    if (order.empty() || rng() % 2) {
      const std::size_t n = 1 + rng() % 8192;
      const int k = class_ceil(n);
      const bool aligned = rng() % 3 == 0;
      void* p = c.cache.take(k, aligned);
      if (p == nullptr)
        p = aligned ? memalign(kCacheAlign, class_size(k)) : std::malloc(class_size(k));
      ASSERT_TRUE(live.insert(p).second) << "handed out twice: " << p;
      ASSERT_GE(malloc_usable_size(p), n);
      if (aligned) {
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % kCacheAlign, 0u);
      }
      order.push_back(p);
    } else {
      const std::size_t at = rng() % order.size();
      void* p = order[at];
      order[at] = order.back();
      order.pop_back();
      live.erase(p);
      if (c.put(p) != ThreadCache::Put::kept) std::free(p);
    }
  }
  std::size_t drained = 0;
  c.cache.drain([&](void* p) {
    ASSERT_EQ(live.count(p), 0u);
    drained++;
    std::free(p);
  });
  EXPECT_GT(drained, 0u);
  EXPECT_EQ(c.cache.bytes, 0u);
  for (void* p : order) std::free(p);
  for (void* p : c.released) std::free(p);
  c.released.clear();
}

}  // namespace
}  // namespace modelmem::preload

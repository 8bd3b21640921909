// The shared free list: best fit, lowest offset among equals, merging on release, and a random
// pattern checked against a byte map.
#include "modelmem/core/free_list.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace modelmem::core {
namespace {

void expect_consistent(const FreeList& f) {
  std::size_t bytes = 0, largest = 0, prev_end = 0;
  bool first = true;
  for (auto& [offset, size] : f.by_offset()) {
    ASSERT_GT(size, 0u);
    if (!first) {
      ASSERT_GT(offset, prev_end) << "touching or overlapping free ranges";
    }
    first = false;
    prev_end = offset + size;
    bytes += size;
    largest = std::max(largest, size);
  }
  EXPECT_EQ(bytes, f.bytes());
  EXPECT_EQ(largest, f.largest());
}

TEST(FreeList, BestFitTakesTheSmallestRangeThatFitsLowestOffsetFirst) {
  FreeList f;
  f.release(0, 100);
  f.release(200, 50);
  f.release(300, 50);
  f.release(400, 70);
  auto r = f.best_fit(40);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->offset, 200u);
  EXPECT_EQ(r->size, 50u);
  EXPECT_EQ(f.allocate(60), std::optional<std::size_t>(400));
  EXPECT_EQ(f.allocate(200), std::nullopt);
  EXPECT_EQ(f.count(), 4u);  // 400..460 taken, 460..470 left
  EXPECT_EQ(f.bytes(), 100u + 50 + 50 + 10);
  expect_consistent(f);
}

TEST(FreeList, ReleaseMergesWithBothNeighbours) {
  FreeList f;
  f.release(0, 10);
  f.release(20, 10);
  EXPECT_EQ(f.count(), 2u);
  f.release(10, 10);
  EXPECT_EQ(f.count(), 1u);
  EXPECT_EQ(f.largest(), 30u);
  auto last = f.last();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->offset, 0u);
  EXPECT_EQ(last->end(), 30u);
}

TEST(FreeList, TakeInsideARangeLeavesBothSidesFree) {
  FreeList f;
  f.release(100, 100);
  f.take({100, 100}, 130, 20);
  EXPECT_EQ(f.count(), 2u);
  EXPECT_EQ(f.bytes(), 80u);
  EXPECT_EQ(f.by_offset().at(100), 30u);
  EXPECT_EQ(f.by_offset().at(150), 50u);
  f.erase(150);
  EXPECT_EQ(f.bytes(), 30u);
  EXPECT_EQ(f.first_of_size(31), f.size_end());
}

TEST(FreeList, RandomPatternMatchesAByteMap) {
  constexpr std::size_t kSpace = 4096;
  FreeList f;
  f.release(0, kSpace);
  std::vector<bool> used(kSpace, false);
  std::vector<std::pair<std::size_t, std::size_t>> live;
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 2 == 0) {
      std::size_t size = 1 + rng() % 200;
      auto at = f.allocate(size);
      if (!at) {
        // Really no free run of that length?
        std::size_t run = 0, best = 0;
        for (bool u : used) best = std::max(best, run = u ? 0 : run + 1);
        ASSERT_LT(best, size);
        continue;
      }
      for (std::size_t b = *at; b < *at + size; ++b) {
        ASSERT_FALSE(used[b]) << "byte " << b << " handed out twice";
        used[b] = true;
      }
      live.push_back({*at, size});
    } else {
      std::size_t k = rng() % live.size();
      auto [at, size] = live[k];
      live[k] = live.back();
      live.pop_back();
      for (std::size_t b = at; b < at + size; ++b) used[b] = false;
      f.release(at, size);
    }
    if (i % 97 == 0) expect_consistent(f);
  }
  std::size_t free_bytes = 0;
  for (bool u : used) free_bytes += u ? 0 : 1;
  EXPECT_EQ(f.bytes(), free_bytes);
}

}  // namespace
}  // namespace modelmem::core

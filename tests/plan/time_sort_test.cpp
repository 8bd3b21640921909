// The private time sorts behind the lower bound, validation and the heap simulation: both the
// counting path (times in a short range) and the key-sort path (times spread wide) give a
// stable order; the lower bound on them equals a brute-force sweep, negative times included.
#include "plan/time_sort.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "modelmem/plan/problem.hpp"

using namespace modelmem::plan;

namespace {

std::vector<std::size_t> reference_order(const std::vector<Time>& keys) {
  std::vector<std::size_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  return order;
}

TEST(TimeSort, StableInTheCountingAndTheKeyPaths) {
  std::mt19937_64 rng(5);
  for (Time spread : {Time{3}, Time{100}, Time{1} << 40, std::numeric_limits<Time>::max()}) {
    std::vector<Time> keys(500);
    for (Time& k : keys) {
      k = static_cast<Time>(rng() % 7) * (spread / 7 + 1) - spread / 2;
      if (spread == std::numeric_limits<Time>::max() && rng() % 3 == 0)
        k = rng() % 2 ? std::numeric_limits<Time>::max() : std::numeric_limits<Time>::min();
    }
    EXPECT_EQ(detail::stable_order_by(keys.size(), [&](std::size_t i) { return keys[i]; }),
              reference_order(keys))
        << "spread " << spread;
  }
  EXPECT_TRUE(detail::stable_order_by(0, [](std::size_t) { return Time{0}; }).empty());
}

std::size_t brute_peak(const Problem& p) {
  std::size_t best = 0;
  for (const Buffer& b : p.buffers) {  // the peak is at some buffer's start
    std::size_t live = 0;
    for (const Buffer& c : p.buffers)
      if (c.start <= b.start && b.start < c.end) live += c.size;
    best = std::max(best, live);
  }
  return best;
}

TEST(TimeSort, LowerBoundAndPeakMatchABruteForceSweep) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 40; ++trial) {
    Problem p;
    const Time scale = trial % 2 ? 1 : Time{1} << 50;  // counting path, then the key path
    for (int i = 0; i < 60; ++i) {
      Buffer b;
      b.id = std::to_string(i);
      b.start = (static_cast<Time>(rng() % 30) - 10) * scale;
      b.end = b.start + (1 + static_cast<Time>(rng() % 8)) * scale;
      b.size = 1 + rng() % 1000;
      p.buffers.push_back(b);
    }
    const std::size_t expected = brute_peak(p);
    EXPECT_EQ(lower_bound(p), expected);
    const Peak pk = peak(p);
    EXPECT_EQ(pk.bytes, expected);
    std::size_t at = 0;
    for (std::size_t i : pk.live) at += p.buffers[i].size;
    EXPECT_EQ(at, expected);
  }
}

TEST(Validate, CapacityCheckedOnlyWhenAsked) {
  Problem p;
  p.buffers = {{"a", 8, 0, 2}, {"b", 8, 1, 3}};
  p.capacity = 10;
  Plan plan{{0, 8}, 16};
  EXPECT_FALSE(validate(p, plan));
  EXPECT_TRUE(validate(p, plan, false));
  Plan overlap{{0, 4}, 12};
  EXPECT_FALSE(validate(p, overlap, false));
}

}  // namespace

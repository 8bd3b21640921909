// Randomised: every live block carries a distinct pattern; after every step all patterns are
// checked (one word per 512-byte granule, which catches any overlap because blocks start on
// granule boundaries) and the shadow map of live ranges must have no overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "alloc/pool_invariants.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::alloc {
namespace {

struct Live {
  unsigned char* ptr;
  std::size_t size;
  std::uint64_t tag;
};

std::uint64_t pattern(const Live& b, std::size_t granule) {
  return (b.tag << 24) ^ (granule * 0x9e3779b97f4a7c15ull);
}

// Writes one word at the start of every 512-byte granule (every 8th past 64 KiB, to keep the
// check of every live block after every step cheap) and the block's last byte. Blocks start on
// granule boundaries, so a block handed out twice overwrites a marked word; the shadow map of
// live ranges checks overlap exactly besides.
std::size_t stride(const Live& b) {
  return b.size <= 64 * 1024 ? 512 : 4096;
}

void fill(const Live& b) {
  for (std::size_t g = 0; g < b.size; g += stride(b)) {
    const std::uint64_t w = pattern(b, g / 512);
    std::memcpy(b.ptr + g, &w, std::min<std::size_t>(8, b.size - g));
  }
  b.ptr[b.size - 1] = static_cast<unsigned char>(b.tag);
}

bool check(const Live& b) {
  for (std::size_t g = 0; g < b.size; g += stride(b)) {
    const std::uint64_t w = pattern(b, g / 512);
    const std::size_t n = std::min<std::size_t>(8, b.size - g);
    if (n == 8 && b.size - 1 > g + 7) {
      std::uint64_t got;
      std::memcpy(&got, b.ptr + g, 8);
      if (got != w) return false;
    } else if (b.size - 1 >= g + n) {
      if (std::memcmp(b.ptr + g, &w, n) != 0) return false;
    }
  }
  return b.ptr[b.size - 1] == static_cast<unsigned char>(b.tag);
}

struct Param {
  const char* name;
  bool expandable;
  bool huge;
  std::size_t capacity;  // 0 = unlimited host
  std::size_t max_split;
  unsigned divisions;
  bool pytorch_layout = false;   // expandable: split pools, no recycling
  std::size_t thread_cache = 0;  // thread_cache_bytes
  bool membarrier = true;
};
// Test output names the case ("GetParam() = fixed_limited"), not its bytes.
void PrintTo(const Param& p, std::ostream* os) {
  *os << p.name;
}

class CachingRandom : public ::testing::TestWithParam<Param> {};

TEST_P(CachingRandom, NoBlockHandedOutTwice) {
  const Param& prm = GetParam();
  device::DevicePtr dev = device::make_host_device({.huge_pages = prm.huge});
  if (prm.capacity != 0) dev = device::make_limited_device(dev, prm.capacity, prm.expandable);
  CachingOptions o;
  o.expandable_segments = prm.expandable;
  o.expandable_split_pools = prm.pytorch_layout;
  o.expandable_recycle = !prm.pytorch_layout;
  if (prm.max_split != 0) o.max_split_size = prm.max_split;
  if (prm.divisions != 0) o.roundup_power2_divisions = {{0, prm.divisions}};
  o.thread_cache_bytes = prm.thread_cache;
  o.thread_cache_membarrier = prm.membarrier;
  CachingAllocator a(dev, o);

  std::mt19937_64 rng(12345);
  std::vector<Live> live;
  std::map<std::uintptr_t, std::size_t> shadow;
  std::uint64_t next_tag = 1;
  std::int64_t requested = 0;
  for (int step = 0; step < 3000; ++step) {
    const unsigned op = rng() % 100;
    if ((op < 55 && live.size() < 40) || live.empty()) {
      std::size_t size;
      const unsigned kind = rng() % 100;
      if (kind < 25) {
        // A few sizes that come back often (thread-cache hits, exact-fit reuse).
        constexpr std::size_t kCommon[] = {4 * kKiB, 64 * kKiB, 64 * kKiB - 100, 300 * kKiB};
        size = kCommon[rng() % 4];
      } else if (kind < 65) {
        size = 1 + rng() % (64 * kKiB);
      } else if (kind < 97) {
        size = 64 * kKiB + rng() % (1536 * kKiB);
      } else {
        size = 2 * kMiB + rng() % (22 * kMiB);
      }
      const Stream stream = rng() % 3;
      unsigned char* p;
      try {
        p = static_cast<unsigned char*>(a.allocate(size, stream));
      } catch (const OutOfMemory&) {
        ASSERT_NE(prm.capacity, 0u) << "unlimited host device ran out";
        continue;
      }
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
      const auto addr = reinterpret_cast<std::uintptr_t>(p);
      auto it = shadow.upper_bound(addr);
      if (it != shadow.end()) {
        ASSERT_LE(addr + size, it->first) << "overlaps the next block";
      }
      if (it != shadow.begin()) {
        --it;
        ASSERT_LE(it->first + it->second, addr) << "overlaps the previous block";
      }
      shadow[addr] = size;
      Live b{p, size, next_tag++};
      fill(b);
      live.push_back(b);
      requested += static_cast<std::int64_t>(size);
      if (rng() % 10 == 0) a.record_stream(p, 3);
    } else if (op < 97) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(check(live[i])) << "block " << live[i].tag << " corrupted";
      shadow.erase(reinterpret_cast<std::uintptr_t>(live[i].ptr));
      requested -= static_cast<std::int64_t>(live[i].size);
      a.deallocate(live[i].ptr);
      live[i] = live.back();
      live.pop_back();
    } else if (op < 98) {
      a.synchronize();
    } else {
      a.trim();
    }
    for (const Live& b : live) ASSERT_TRUE(check(b)) << "step " << step << " tag " << b.tag;
    const Stats s = a.stats();
    ASSERT_EQ(s.requested_bytes.all.current, requested);
    ASSERT_EQ(s.allocation.all.current, static_cast<std::int64_t>(live.size()));
    ASSERT_LE(s.allocated_bytes.all.current, s.active_bytes.all.current);
    ASSERT_LE(s.active_bytes.all.current + s.inactive_split_bytes.all.current,
              s.reserved_bytes.all.current);
    ASSERT_EQ(s.allocated_bytes.all.current,
              s.allocated_bytes.small.current + s.allocated_bytes.large.current);
    ASSERT_EQ(s.reserved_bytes.all.current,
              s.reserved_bytes.small.current + s.reserved_bytes.large.current);
    MODELMEM_EXPECT_POOL_OK(a);
  }
  for (const Live& b : live) {
    ASSERT_TRUE(check(b));
    a.deallocate(b.ptr);
  }
  a.synchronize();
  const Stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.active_bytes.all.current, 0);
  EXPECT_EQ(s.requested_bytes.all.current, 0);
  a.trim();
  if (!prm.expandable) {
    EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
  } else {
    // Only partial pages at block edges stay mapped; after a full trim nothing is free.
    EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Caching, CachingRandom,
    ::testing::Values(Param{"fixed", false, false, 0, 0, 0},
                      Param{"fixed_limited", false, false, 96 * kMiB, 0, 0},
                      Param{"fixed_max_split", false, false, 0, 8 * kMiB, 0},
                      Param{"fixed_pow2", false, false, 0, 0, 4},
                      Param{"expandable", true, false, 0, 0, 0},
                      Param{"expandable_2mib_pages", true, true, 0, 0, 0},
                      Param{"expandable_limited", true, true, 96 * kMiB, 0, 0},
                      Param{"expandable_pytorch_layout", true, true, 0, 0, 0, true},
                      Param{"fixed_thread_cache", false, false, 0, 0, 0, false, 2 * kMiB},
                      Param{"fixed_limited_thread_cache_atomic", false, false, 96 * kMiB, 0, 0,
                            false, 4 * kMiB, false},
                      Param{"expandable_thread_cache", true, true, 0, 0, 0, false, 2 * kMiB}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace modelmem::alloc

// The allocator contract, run over every strategy and adaptor (RMM-style conformance suite):
// alignment, no overlap under a random pattern, exact statistics, a double free rejected with
// the state unchanged, out of memory carrying its numbers, trim returning memory.
//
// Each strategy is built by a factory from a DevicePtr, so the suite runs over any device: a
// test file includes this header and instantiates the suite with its device, e.g.
//
//   INSTANTIATE_TEST_SUITE_P(Npu, Conformance,
//                            ::testing::ValuesIn(conformance_cases("npu", [] { return npu(); })),
//                            conformance_name);
//
// The suite puts a capacity limit of kCapacity in front of the device (make_limited_device), so
// that out of memory is reached the same way everywhere; with virtual memory when the device
// has it (the expandable case needs it).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "alloc/event_recorder.hpp"
#include "modelmem/alloc/allocator.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/partitions.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::alloc::conformance {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
/// Capacity of the limited view every strategy runs on.
inline constexpr std::size_t kCapacity = 96 * kMiB;
/// What the strategies with a fixed budget (static pool, quotas, partitions) are given.
inline constexpr std::size_t kBudget = 48 * kMiB;

/// One strategy or adaptor under test.
struct StrategyCase {
  std::string name;
  std::size_t alignment = 256;     ///< the least alignment it promises
  bool on_device = true;           ///< false: the C heap (system), the device is not used
  bool keeps_reservation = false;  ///< true: what it took at construction stays (static pools)
  bool needs_vm = false;           ///< needs virtual memory (expandable segments)
  std::function<std::shared_ptr<Allocator>(device::DevicePtr)> make;
};

/// Every strategy and adaptor of modelmem, each built on the given device.
inline std::vector<StrategyCase> strategy_cases() {
  std::vector<StrategyCase> out;
  out.push_back({"static", 256, true, true, false, [](device::DevicePtr d) {
                   return std::make_shared<StaticAllocator>(d, StaticOptions{kBudget, 256});
                 }});
  out.push_back({"caching", 512, true, false, false,
                 [](device::DevicePtr d) { return std::make_shared<CachingAllocator>(d); }});
  out.push_back({"caching_thread_cache", 512, true, false, false, [](device::DevicePtr d) {
                   CachingOptions o;
                   o.thread_cache_bytes = 2 * kMiB;
                   return std::make_shared<CachingAllocator>(d, o);
                 }});
  out.push_back({"caching_expandable", 512, true, false, true, [](device::DevicePtr d) {
                   CachingOptions o;
                   o.expandable_segments = true;
                   o.expandable_reserve = kCapacity;
                   return std::make_shared<CachingAllocator>(d, o);
                 }});
  out.push_back({"planned", 256, true, false, false, [](device::DevicePtr d) {
                   PlannedOptions o;
                   o.device = d;
                   o.fallback = std::make_shared<DirectAllocator>(d);
                   return std::make_shared<PlannedAllocator>(std::move(o));
                 }});
  out.push_back({"system", 64, false, false, false,
                 [](device::DevicePtr) { return std::make_shared<SystemAllocator>(); }});
  out.push_back({"direct", 256, true, false, false,
                 [](device::DevicePtr d) { return std::make_shared<DirectAllocator>(d); }});
  out.push_back({"quota", 512, true, false, false, [](device::DevicePtr d) {
                   QuotaOptions q;
                   q.name = "quota";
                   q.quota = kBudget;
                   q.device = d;
                   return std::make_shared<QuotaAdaptor>(std::make_shared<CachingAllocator>(d), q);
                 }});
  out.push_back({"partitions", 256, true, true, false, [](device::DevicePtr d) {
                   PartitionOptions o;
                   o.budget = kBudget;
                   auto p = std::make_shared<Partitions>(
                       d, std::vector<PoolSpec>{{"a", 0, 1.0}, {"b", 0, 1.0}}, o);
                   // The pool keeps its Partitions alive (aliasing constructor).
                   return std::shared_ptr<Allocator>(p, &p->pool("a"));
                 }});
  out.push_back({"partitions_caching", 512, true, false, false, [](device::DevicePtr d) {
                   PartitionOptions o;
                   o.budget = kBudget;
                   o.backing = PoolBacking::kCaching;
                   auto p = std::make_shared<Partitions>(
                       d, std::vector<PoolSpec>{{"a", 0, 1.0}, {"b", 0, 1.0}}, o);
                   return std::shared_ptr<Allocator>(p, &p->pool("b"));
                 }});
  return out;
}

/// One instance of the suite: a strategy on a device.
struct Case {
  std::string device_name;
  std::function<device::DevicePtr()> device;
  StrategyCase strategy;
};

/// Every strategy on the device `make_device` returns (called once per test).
inline std::vector<Case> conformance_cases(const std::string& device_name,
                                           std::function<device::DevicePtr()> make_device) {
  std::vector<Case> out;
  for (StrategyCase& s : strategy_cases()) out.push_back({device_name, make_device, s});
  return out;
}

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.device_name << "_" << c.strategy.name;
}

inline std::string conformance_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.device_name + "_" + info.param.strategy.name;
}

class Conformance : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    device::DevicePtr base = c.device();
    const bool vm = base->probe_virtual_memory().supported;
    if (c.strategy.needs_vm && !vm) GTEST_SKIP() << base->name() << " has no virtual memory";
    device_ = device::make_limited_device(base, kCapacity, vm);
    alloc_ = c.strategy.make(device_);
  }
  void TearDown() override {
    alloc_.reset();
    // Every strategy gives everything back when destroyed.
    if (device_) {
      EXPECT_EQ(device_->memory_info().free, kCapacity) << "device memory leaked";
    }
  }

  const StrategyCase& strategy() const { return GetParam().strategy; }

  /// The statistics that must not move when a call is refused.
  static std::vector<std::int64_t> numbers(const Stats& s) {
    std::vector<std::int64_t> v;
    for (const CounterSet* c :
         {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
          &s.requested_bytes, &s.allocation, &s.segment, &s.active, &s.inactive_split})
      for (const Counter* k : {&c->all, &c->small, &c->large})
        for (std::int64_t x : {k->current, k->peak, k->allocated, k->freed}) v.push_back(x);
    v.push_back(s.num_device_alloc);
    v.push_back(s.num_device_free);
    return v;
  }

  device::DevicePtr device_;
  std::shared_ptr<Allocator> alloc_;
};

TEST_P(Conformance, BlocksAreAlignedAndWritable) {
  std::vector<void*> blocks;
  for (std::size_t size : {std::size_t{1}, std::size_t{100}, std::size_t{4096},
                           100 * std::size_t{1000}, 3 * kMiB + 7}) {
    void* p = alloc_->allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % strategy().alignment, 0u)
        << size << " B at " << p;
    std::memset(p, 0xab, size);
    blocks.push_back(p);
  }
  for (void* p : blocks) alloc_->deallocate(p);
}

TEST_P(Conformance, NoOverlapAndExactStatsUnderARandomPattern) {
  struct Live {
    unsigned char* p;
    std::size_t size;
    unsigned char tag;
  };
  std::mt19937_64 rng(2026);
  std::vector<Live> live;
  std::map<std::uintptr_t, std::size_t> shadow;
  std::int64_t requested = 0;
  for (int step = 0; step < 1500; ++step) {
    if (live.empty() || (rng() % 100 < 55 && live.size() < 48)) {
      const std::size_t size =
          rng() % 10 < 8 ? 1 + rng() % (64 * 1024) : 64 * 1024 + rng() % (2 * kMiB);
      unsigned char* p;
      try {
        p = static_cast<unsigned char*>(alloc_->allocate(size));
      } catch (const OutOfMemory&) {
        continue;  // the budget is reached: refused, nothing handed out
      }
      const auto a = reinterpret_cast<std::uintptr_t>(p);
      ASSERT_EQ(a % strategy().alignment, 0u);
      auto next = shadow.upper_bound(a);
      if (next != shadow.end()) {
        ASSERT_LE(a + size, next->first) << "overlaps the next block";
      }
      if (next != shadow.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, a) << "overlaps the previous block";
      }
      shadow[a] = size;
      const auto tag = static_cast<unsigned char>(step);
      p[0] = tag;
      p[size - 1] = tag;
      p[size / 2] = tag;
      live.push_back({p, size, tag});
      requested += static_cast<std::int64_t>(size);
    } else {
      const std::size_t i = rng() % live.size();
      const Live b = live[i];
      ASSERT_EQ(b.p[0], b.tag);
      ASSERT_EQ(b.p[b.size - 1], b.tag);
      ASSERT_EQ(b.p[b.size / 2], b.tag);
      alloc_->deallocate(b.p);
      shadow.erase(reinterpret_cast<std::uintptr_t>(b.p));
      requested -= static_cast<std::int64_t>(b.size);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_EQ(alloc_->check_invariants(), "") << "step " << step;
    const Stats s = alloc_->stats();
    ASSERT_EQ(s.requested_bytes.all.current, requested) << "step " << step;
    ASSERT_EQ(s.allocation.all.current, static_cast<std::int64_t>(live.size())) << step;
    ASSERT_GE(s.allocated_bytes.all.current, requested);
    ASSERT_EQ(s.allocated_bytes.all.current,
              s.allocated_bytes.small.current + s.allocated_bytes.large.current);
    ASSERT_LE(s.allocated_bytes.all.current, s.allocated_bytes.all.peak);
    if (strategy().on_device) {
      ASSERT_LE(s.allocated_bytes.all.current, s.reserved_bytes.all.current);
    }
  }
  for (const Live& b : live) alloc_->deallocate(b.p);
  const Stats s = alloc_->stats();
  EXPECT_EQ(s.requested_bytes.all.current, 0);
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.active_bytes.all.current, 0);
}

TEST_P(Conformance, DoubleFreeIsRejectedWithTheStateUnchanged) {
  void* a = alloc_->allocate(1000);
  void* b = alloc_->allocate(300000);
  alloc_->deallocate(a);
  const Stats before = alloc_->stats();
  EXPECT_THROW(alloc_->deallocate(a), InvalidInput);
  int local = 0;
  EXPECT_THROW(alloc_->deallocate(&local), InvalidInput) << "a pointer it never handed out";
  EXPECT_EQ(numbers(alloc_->stats()), numbers(before));
  // Still serving: the other block frees, a new one comes.
  alloc_->deallocate(b);
  void* c = alloc_->allocate(1000);
  EXPECT_EQ(alloc_->stats().allocation.all.current, 1);
  alloc_->deallocate(c);
}

TEST_P(Conformance, OutOfMemoryCarriesItsNumbers) {
  if (!strategy().on_device) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer aborts on an impossible C heap request";
#endif
  }
  void* held = alloc_->allocate(4 * kMiB);
  const Stats before = alloc_->stats();
  const std::size_t huge = strategy().on_device ? 2 * kCapacity : std::size_t{1} << 62;
  try {
    alloc_->allocate(huge);
    FAIL() << "a request of " << huge << " B was served";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().requested, huge);
    EXPECT_FALSE(e.info().where.empty());
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    if (strategy().on_device) {
      EXPECT_GE(e.info().allocated, 4 * kMiB) << e.what();
      EXPECT_LE(e.info().device_free, kCapacity) << e.what();
    }
  }
  const Stats after = alloc_->stats();
  EXPECT_EQ(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
  EXPECT_EQ(after.requested_bytes.all.current, before.requested_bytes.all.current);
  EXPECT_GE(after.num_ooms, 1);
  alloc_->deallocate(held);
}

TEST_P(Conformance, TrimReturnsMemory) {
  const std::int64_t reserved_at_start = alloc_->stats().reserved_bytes.all.current;
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(alloc_->allocate((i + 1) * 50000));
  for (void* p : blocks) alloc_->deallocate(p);
  alloc_->trim();
  const Stats s = alloc_->stats();
  if (strategy().keeps_reservation) {
    // A static pool keeps what it took at construction, and takes nothing more.
    EXPECT_GT(reserved_at_start, 0);
    EXPECT_EQ(s.reserved_bytes.all.current, reserved_at_start);
  } else {
    EXPECT_EQ(s.reserved_bytes.all.current, 0);
    if (strategy().on_device) {
      EXPECT_EQ(device_->memory_info().free, kCapacity);
    }
  }
}

// The contract the base class keeps for every strategy: a listener on the allocator hears each
// block once, a free with the size its alloc had; size 0 is refused with no event; an OOM is one
// kOom; block_size() answers for live blocks only.
TEST_P(Conformance, EventsAndQueriesAreTheSameForEveryStrategy) {
  testing::EventRecorder rec;
  alloc_->set_listener(&rec);
  const std::vector<std::size_t> sizes = {1, 100, 4096, 300000, 3 * kMiB + 7};
  std::vector<void*> blocks;
  for (std::size_t size : sizes) {
    blocks.push_back(alloc_->allocate(size, 7));
    EXPECT_EQ(alloc_->block_size(blocks.back()), size);
    EXPECT_EQ(alloc_->block(blocks.back()).stream, 7u);
  }
  EXPECT_THROW(alloc_->allocate(0), InvalidInput);
  if (strategy().on_device) {
    EXPECT_THROW(alloc_->allocate(2 * kCapacity), OutOfMemory);
  }
  for (void* p : blocks) alloc_->deallocate(p);
  EXPECT_EQ(alloc_->block_size(blocks.front()), 0u) << "a freed block is not live";
  int local = 0;
  EXPECT_EQ(alloc_->block_size(&local), 0u);
  EXPECT_THROW(alloc_->deallocate(blocks.front()), InvalidInput);
  alloc_->set_listener(nullptr);

  std::vector<Event> block_events;
  for (const Event& e : rec.events)
    if (e.kind == EventKind::kAlloc || e.kind == EventKind::kFree || e.kind == EventKind::kOom)
      block_events.push_back(e);
  const std::size_t ooms = strategy().on_device ? 1 : 0;
  ASSERT_EQ(block_events.size(), 2 * sizes.size() + ooms);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Event& a = block_events[i];
    const Event& f = block_events[sizes.size() + ooms + i];
    EXPECT_EQ(a.kind, EventKind::kAlloc);
    EXPECT_EQ(a.size, sizes[i]);
    EXPECT_EQ(a.stream, 7u);
    EXPECT_EQ(f.kind, EventKind::kFree);
    EXPECT_EQ(f.address, a.address);
    EXPECT_EQ(f.size, a.size) << "a free carries the size its alloc did";
    EXPECT_EQ(f.stream, a.stream);
  }
  if (ooms) {
    EXPECT_EQ(block_events[sizes.size()].kind, EventKind::kOom);
  }
  // Segments reported are segments returned or still held, never freed twice.
  std::map<std::uintptr_t, std::size_t> segments;
  for (const Event& e : rec.events) {
    if (e.kind == EventKind::kSegmentAlloc) {
      EXPECT_TRUE(segments.emplace(e.address, e.size).second) << "segment reported twice";
    }
    if (e.kind == EventKind::kSegmentFree) {
      EXPECT_EQ(segments.erase(e.address), 1u) << "segment freed but never reported";
    }
  }
  EXPECT_EQ(alloc_->check_invariants(), "");
}

}  // namespace modelmem::alloc::conformance

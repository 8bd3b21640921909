// Every strategy and the partitions on the emulated NPU: random use with no overlap and intact
// contents, OOM numbers at the emulated capacity, and fault injection on every ACL call.
#include <gtest/gtest.h>

#include <cctype>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "acl/emulation.hpp"
#include "modelmem/alloc/partitions.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/acl.hpp"

namespace modelmem {
namespace {

using testing::Emulation;
// Live blocks with their sizes and a tag written at both ends; checks no two overlap.
class Ledger {
 public:
  void add(void* p, std::size_t size, std::uint8_t tag) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto next = blocks_.lower_bound(a);
    ASSERT_TRUE(next == blocks_.end() || next->first >= a + size) << "overlaps the next block";
    if (next != blocks_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second.first, a) << "overlaps the previous block";
    }
    auto* c = static_cast<std::uint8_t*>(p);
    c[0] = tag;
    c[size - 1] = tag;
    c[size / 2] = tag;
    blocks_[a] = {size, tag};
  }
  void check_and_remove(void* p) {
    auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(p));
    ASSERT_NE(it, blocks_.end());
    auto* c = static_cast<std::uint8_t*>(p);
    const auto [size, tag] = it->second;
    EXPECT_EQ(c[0], tag);
    EXPECT_EQ(c[size / 2], tag);
    EXPECT_EQ(c[size - 1], tag);
    blocks_.erase(it);
  }
  std::vector<void*> pointers() const {
    std::vector<void*> out;
    for (auto& [a, b] : blocks_) out.push_back(reinterpret_cast<void*>(a));
    return out;
  }
  std::size_t size() const { return blocks_.size(); }

 private:
  std::map<std::uintptr_t, std::pair<std::size_t, std::uint8_t>> blocks_;
};

std::size_t random_size(std::mt19937_64& rng) {
  // 512 B to 8 MiB, log-uniform, not aligned.
  std::uniform_real_distribution<double> log2(9.0, 23.0);
  return static_cast<std::size_t>(std::exp2(log2(rng))) + rng() % 300;
}

class NpuStrategy : public ::testing::TestWithParam<const char*> {};

// A readable test name: the configuration without "device:npu,", every other sign an underscore
// ("strategy_caching_expandable_segments_True").
std::string acl_config_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string text = info.param;
  if (text.starts_with("device:npu,")) text.erase(0, 11);
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return text;
}

TEST_P(NpuStrategy, RandomUseHasNoOverlapAndGivesEverythingBack) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "512"}});
  {
    config::Built b = config::build(config::parse_config(GetParam()));
    ASSERT_EQ(b.device->name(), "npu:0");
    alloc::Allocator& a = *b.allocator;
    std::mt19937_64 rng(42);
    Ledger live;
    for (int step = 0; step < 6; ++step) {
      a.begin_step();
      for (int i = 0; i < 150; ++i) {
        if (live.size() > 0 && rng() % 3 == 0) {
          auto ptrs = live.pointers();
          void* p = ptrs[rng() % ptrs.size()];
          live.check_and_remove(p);
          a.deallocate(p);
        } else {
          std::size_t size = random_size(rng);
          void* p = a.allocate(size);
          ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
          live.add(p, size, static_cast<std::uint8_t>(i));
        }
      }
      a.end_step();
    }
    for (void* p : live.pointers()) {
      live.check_and_remove(p);
      a.deallocate(p);
    }
    EXPECT_EQ(a.stats().allocated_bytes.all.current, 0);
    a.trim();
  }
  EXPECT_TRUE(emu.holds_nothing());
}

TEST_P(NpuStrategy, OutOfMemoryAtTheEmulatedCapacityCarriesTheNumbersAndTheNextRequestWorks) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "512"}});
  {
    config::Built b = config::build(config::parse_config(GetParam()));
    alloc::Allocator& a = *b.allocator;
    std::vector<void*> held;
    try {
      for (int i = 0; i < 100; ++i) held.push_back(a.allocate(6 * kMiB));
      FAIL() << "512 MiB held 100 blocks of 6 MiB";
    } catch (const OutOfMemory& e) {
      EXPECT_EQ(e.info().requested, 6 * kMiB) << e.what();
      // Either the device is (nearly) full or, for a static pool, the pool is.
      EXPECT_TRUE(e.info().device_free < 8 * kMiB || e.info().largest_free_block < 6 * kMiB)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("6.00 MiB"), std::string::npos) << e.what();
    }
    EXPECT_GE(held.size(), 10u);
    EXPECT_GE(a.stats().num_ooms, 1);
    a.deallocate(held.back());
    held.pop_back();
    void* p = a.allocate(4 * kMiB);  // the pool still works
    held.push_back(p);
    for (void* q : held) a.deallocate(q);
  }
  EXPECT_TRUE(emu.holds_nothing());
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, NpuStrategy,
    ::testing::Values("device:npu,strategy:static,static_pool_mb:400",
                      "device:npu,strategy:caching",
                      "device:npu,strategy:caching,expandable_segments:True",
                      "device:npu,strategy:planned,planned_steps:marked",
                      "device:npu,strategy:planned,planned_steps:marked,planned_fallback:caching"),
    acl_config_name);

TEST(NpuExpandable, MapsPagesOnDemandAndUnmapsThemOnTrimAfterSynchronising) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"}});
  {
    config::Built b = config::build(config::parse_config("device:npu,expandable_segments:True"));
    EXPECT_FALSE(b.fallback_warning.has_value());
    EXPECT_EQ(b.probe, "npu:0: virtual memory supported");
    void* p = b.allocator->allocate(30 * kMiB);
    EXPECT_EQ(emu.calls("aclrtMallocAlign32"), 0u);  // no fixed segments
    EXPECT_GE(emu.state().mappings, 15u);            // 2 MiB pages
    EXPECT_EQ(emu.state().mappings, emu.calls("aclrtMapMem"));
    b.allocator->deallocate(p);
    const auto syncs = emu.calls("aclrtSynchronizeDevice");
    b.allocator->trim();
    EXPECT_GT(emu.calls("aclrtSynchronizeDevice"), syncs);
    EXPECT_EQ(emu.state().mappings, 0u);
    EXPECT_EQ(emu.state().physical_handles, 0u);
  }
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(NpuPlanned, RepeatingStepsAreServedFromAPlannedArenaOnTheNpu) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"}});
  {
    config::Built b =
        config::build(config::parse_config("device:npu,strategy:planned,planned_steps:marked"));
    auto& planned = dynamic_cast<alloc::PlannedAllocator&>(*b.allocator);
    const std::size_t sizes[] = {3 * kMiB, 700 * 1024, 5 * kMiB, 64 * 1024, 9 * kMiB};
    for (int step = 0; step < 5; ++step) {
      planned.begin_step();
      Ledger live;
      std::vector<void*> ptrs;
      for (std::size_t s : sizes) {
        ptrs.push_back(planned.allocate(s));
        live.add(ptrs.back(), s, static_cast<std::uint8_t>(step + 1));
      }
      for (void* p : ptrs) {
        live.check_and_remove(p);
        planned.deallocate(p);
      }
      planned.end_step();
    }
    alloc::PlannedStats st = planned.planned_stats();
    EXPECT_GE(st.plans_made, 1u);
    EXPECT_GE(st.hits, 3u * std::size(sizes));
    EXPECT_GT(st.arena_size, 0u);
    EXPECT_EQ(emu.state().plain_allocations, 1u);  // the arena: one aclrtMallocAlign32
  }
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(NpuPartitions, PerModelPoolsOnOneNpuNeverTakeFromEachOther) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"}});
  for (auto backing : {alloc::PoolBacking::kStatic, alloc::PoolBacking::kCaching}) {
    {
      alloc::PartitionOptions o;
      o.budget = 200 * kMiB;
      o.backing = backing;
      alloc::Partitions parts(device::make_acl_device(0),
                              {{"bert", 120 * kMiB, 1.0}, {"resnet", 0, 1.0}}, o);
      void* a = parts.pool("bert").allocate(100 * kMiB);
      EXPECT_THROW(parts.pool("bert").allocate(30 * kMiB), QuotaExceeded);
      void* b = parts.pool("resnet").allocate(60 * kMiB);
      EXPECT_THROW(parts.pool("resnet").allocate(30 * kMiB), QuotaExceeded);
      parts.pool("bert").deallocate(a);
      parts.pool("resnet").deallocate(b);
    }
    EXPECT_TRUE(emu.holds_nothing());
  }
}

// ---- fault injection: each ACL call of a workload failing once in turn ----

// Allocates, frees, grows and trims; every operation may fail cleanly. Returns false when the
// stack could not even be built.
void workload(const std::string& conf, Emulation& emu, bool& built, int& failures) {
  built = false;
  config::Built b;
  try {
    b = config::build(config::parse_config(conf));
  } catch (const Error&) {
    ++failures;
    return;
  }
  built = true;
  alloc::Allocator& a = *b.allocator;
  Ledger live;
  const std::size_t sizes[] = {512, 3000, 1 * kMiB, 5 * kMiB, 700, 12 * kMiB, 2 * kMiB + 1};
  for (int round = 0; round < 2; ++round) {
    std::vector<void*> mine;
    for (std::size_t s : sizes) {
      try {
        void* p = a.allocate(s);
        live.add(p, s, static_cast<std::uint8_t>(s));
        mine.push_back(p);
      } catch (const Error&) {
        ++failures;
      }
    }
    for (std::size_t i = 0; i < mine.size(); i += 2) {
      live.check_and_remove(mine[i]);
      a.deallocate(mine[i]);  // a block handed out always comes back
    }
    a.trim();
  }
  for (void* p : live.pointers()) {
    live.check_and_remove(p);
    a.deallocate(p);
  }
  // After whatever failed, the stack still serves (this request may meet the failure itself:
  // then the next one must work).
  void* p = nullptr;
  try {
    p = a.allocate(4096);
  } catch (const Error&) {
    ++failures;
    EXPECT_NO_THROW(p = a.allocate(4096)) << conf;
  }
  if (p != nullptr) a.deallocate(p);
  EXPECT_EQ(a.stats().allocated_bytes.all.current, 0);
  (void)emu;
}

class NpuFaults : public ::testing::TestWithParam<const char*> {};

TEST_P(NpuFaults, EveryAclCallFailingOnceLeaksNothingAndLosesNoBlock) {
  const std::string conf = GetParam();
  std::map<std::string, std::uint64_t> counts;
  {
    Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"}});
    bool built = false;
    int failures = 0;
    workload(conf, emu, built, failures);
    ASSERT_TRUE(built);
    ASSERT_EQ(failures, 0);
    ASSERT_TRUE(emu.holds_nothing());
    std::string names = emu.called();
    for (std::size_t start = 0; start < names.size();) {
      std::size_t end = names.find(',', start);
      if (end == std::string::npos) end = names.size();
      std::string f = names.substr(start, end - start);
      counts[f] = emu.calls(f);
      start = end + 1;
    }
  }
  ASSERT_GT(counts.count("aclrtSetDevice"), 0u);
  int runs = 0;
  for (const auto& [function, n] : counts) {
    for (std::uint64_t k = 1; k <= n; ++k) {
      SCOPED_TRACE(function + " call " + std::to_string(k) + " fails");
      Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"},
                     {"MODELMEM_EMULATED_ACL_FAIL", function + ":" + std::to_string(k)}});
      bool built = false;
      int failures = 0;
      workload(conf, emu, built, failures);
      EXPECT_EQ(emu.state().pending_failures, 0u) << "the failure was never reached";
      EXPECT_TRUE(emu.holds_nothing());
      ++runs;
    }
  }
  EXPECT_EQ(runs, [&] {
    int n = 0;
    for (const auto& [f, k] : counts) n += static_cast<int>(k);
    return n;
  }());
  std::vector<const char*> expected = {"aclInit", "aclrtGetDeviceCount", "aclrtSetDevice",
                                       "aclrtGetMemInfo"};
  if (conf.find("expandable") != std::string::npos) {
    for (const char* f : {"aclrtReserveMemAddress", "aclrtMallocPhysical", "aclrtMapMem",
                          "aclrtUnmapMem", "aclrtFreePhysical", "aclrtReleaseMemAddress",
                          "aclrtSynchronizeDevice", "aclrtMemGetAllocationGranularity"})
      expected.push_back(f);
  } else {
    expected.push_back("aclrtMallocAlign32");
    expected.push_back("aclrtFree");
  }
  for (const char* f : expected) EXPECT_GT(counts.count(f), 0u) << f << " never called";
}

INSTANTIATE_TEST_SUITE_P(Strategies, NpuFaults,
                         ::testing::Values("device:npu,strategy:static,static_pool_mb:64",
                                           "device:npu,strategy:caching",
                                           "device:npu,strategy:caching,expandable_segments:True",
                                           "device:npu,strategy:planned,planned_steps:marked"),
                         acl_config_name);

}  // namespace
}  // namespace modelmem

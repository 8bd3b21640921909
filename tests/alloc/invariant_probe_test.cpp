// Every strategy's and adaptor's invariant check can fail: a test hook (invariant_probe.hpp)
// breaks one piece of its bookkeeping, check_invariants() names the violation, and an allocator
// that checks after every operation (MODELMEM_CHECK_INVARIANTS) aborts on its next operation.
// The caching pool's own corruptions are in caching_invariants_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloc/invariant_probe.hpp"
#include "modelmem/alloc/direct_allocator.hpp"
#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/alloc/pool_router.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/alloc/system_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::alloc {
namespace {

// One allocator, and the hook that breaks (delta > 0) or mends (delta < 0) its bookkeeping.
struct Probed {
  std::shared_ptr<Allocator> allocator;
  std::function<void(std::int64_t)> skew;
};

struct ProbeCase {
  std::string name;
  std::string violation;  // a piece of what check_invariants() says once broken
  std::function<Probed()> make;
};

template <typename T>
Probed probed(std::shared_ptr<T> a) {
  T* raw = a.get();
  return {std::move(a), [raw](std::int64_t d) { InvariantProbe::skew(*raw, d); }};
}

std::vector<ProbeCase> cases() {
  std::vector<ProbeCase> out;
  out.push_back({"static", "statistics differ from the live blocks", [] {
                   return probed(std::make_shared<StaticAllocator>(device::make_host_device(),
                                                                   StaticOptions{8 * kMiB, 256}));
                 }});
  out.push_back({"system", "statistics differ from the live blocks",
                 [] { return probed(std::make_shared<SystemAllocator>()); }});
  out.push_back({"direct", "statistics differ from the live blocks", [] {
                   return probed(std::make_shared<DirectAllocator>(device::make_host_device()));
                 }});
  out.push_back({"planned", "live bytes counted", [] {
                   PlannedOptions o;
                   o.device = device::make_host_device();
                   o.fallback = std::make_shared<DirectAllocator>(o.device);
                   return probed(std::make_shared<PlannedAllocator>(std::move(o)));
                 }});
  out.push_back({"quota", "bytes charged, the live blocks' charges add up to", [] {
                   auto host = device::make_host_device();
                   QuotaOptions q;
                   q.name = "m";
                   q.quota = 8 * kMiB;
                   return probed(
                       std::make_shared<QuotaAdaptor>(std::make_shared<DirectAllocator>(host), q));
                 }});
  out.push_back({"router", "a block is owned by pool index 1", [] {
                   auto host = device::make_host_device();
                   std::vector<NamedPool> pools;
                   pools.push_back({"a", 8 * kMiB, std::make_shared<DirectAllocator>(host)});
                   return probed(std::make_shared<PoolRouter>(
                       std::make_shared<DirectAllocator>(host), pools));
                 }});
  return out;
}

class InvariantProbeTest : public ::testing::TestWithParam<ProbeCase> {};

TEST_P(InvariantProbeTest, TheCheckFiresOnABrokenStateAndNotOnAMendedOne) {
  Probed p = GetParam().make();
  void* a = p.allocator->allocate(1000);
  void* b = p.allocator->allocate(300000);
  p.allocator->deallocate(a);
  ASSERT_EQ(p.allocator->check_invariants(), "");
  p.skew(512);
  const std::string broken = p.allocator->check_invariants();
  EXPECT_NE(broken.find(GetParam().violation), std::string::npos) << broken;
  p.skew(-512);
  EXPECT_EQ(p.allocator->check_invariants(), "");
  p.allocator->deallocate(b);
  EXPECT_EQ(p.allocator->check_invariants(), "");
}

// The check runs inside the allocator, after every operation: the first one after the state
// broke aborts, naming the operation, the allocator and the violation.
TEST_P(InvariantProbeTest, ACheckingAllocatorAbortsOnItsNextOperation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("MODELMEM_CHECK_INVARIANTS", "1", 1);
  Probed p = GetParam().make();
  ::unsetenv("MODELMEM_CHECK_INVARIANTS");
  void* a = p.allocator->allocate(1000);
  p.allocator->deallocate(a);  // checked, and sound
  p.skew(512);
  EXPECT_DEATH(p.allocator->allocate(2000),
               "invariant broken after allocate in .*" + GetParam().violation);
  EXPECT_DEATH(p.allocator->trim(), "invariant broken after trim");
  p.skew(-512);
  void* b = p.allocator->allocate(2000);
  p.allocator->deallocate(b);
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, InvariantProbeTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ProbeCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace modelmem::alloc

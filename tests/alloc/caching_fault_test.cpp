// Fault injection at every device call: a fixed scenario runs once cleanly to count the calls of
// each kind, then once per call with exactly that call failing (and once with it and every later
// call of its kind failing). After every step the pool's reserved bytes must equal what the
// device ledger says is taken; at the end everything must come back, exactly once.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "support/faulty_device.hpp"

namespace modelmem::alloc {
namespace {

struct Outcome {
  int ooms = 0;
};

// The scenario: allocations of both pools and several streams, frees that split and merge,
// record_stream, trim, and requests large enough to need the out-of-memory ladder.
Outcome scenario(CachingAllocator& a, device::FaultyDevice& dev) {
  Outcome out;
  std::vector<void*> live;
  auto check = [&] {
    const Stats s = a.stats();
    ASSERT_EQ(static_cast<std::size_t>(s.reserved_bytes.all.current), dev.outstanding_bytes());
    ASSERT_EQ(s.allocation.all.current, static_cast<std::int64_t>(live.size()));
    ASSERT_EQ(dev.bad_calls(), 0u);
  };
  auto alloc = [&](std::size_t size, Stream stream) {
    try {
      void* p = a.allocate(size, stream);
      std::memset(p, 0x5a, std::min<std::size_t>(size, 4096));
      live.push_back(p);
    } catch (const OutOfMemory& e) {
      if (std::getenv("FAULT_DEBUG")) std::fprintf(stderr, "%s\n", e.what());
      ++out.ooms;
    }
    check();
  };
  auto free_at = [&](std::size_t i) {
    if (live.empty()) return;
    i %= live.size();
    a.deallocate(live[i]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    check();
  };
  alloc(100, 0);
  alloc(3 * kMiB, 0);
  alloc(25 * kMiB, 0);
  alloc(700 * kKiB, 1);
  free_at(1);
  alloc(2 * kMiB, 0);
  if (!live.empty()) a.record_stream(live[0], 5);
  free_at(0);
  alloc(12 * kMiB, 1);
  alloc(300 * kKiB, 1);
  a.trim();
  check();
  alloc(1 * kMiB, 0);
  a.synchronize();
  check();
  free_at(2);
  alloc(20 * kMiB, 2);  // close to the capacity
  alloc(5 * kMiB, 0);
  free_at(0);
  free_at(3);
  alloc(20 * kMiB, 1);
  while (!live.empty()) free_at(live.size() - 1);
  a.synchronize();
  a.trim();
  check();
  EXPECT_EQ(a.stats().reserved_bytes.all.current, 0);
  return out;
}

struct Case {
  bool expandable;
  device::FaultOp op;
};

void run_all_faults(bool expandable) {
  using device::FaultOp;
  auto make = [&](device::FaultyDevice::Predicate pred) {
    auto host = device::make_host_device({.huge_pages = true});
    return device::make_faulty_device(device::make_limited_device(host, 96 * kMiB, true),
                                      std::move(pred));
  };
  CachingOptions o;
  o.expandable_segments = expandable;
  o.expandable_reserve = 128 * kMiB;
  o.expandable_map_chunk = 2 * kMiB;

  std::uint64_t clean_calls[3];
  {
    auto dev = make(nullptr);
    {
      CachingAllocator a(dev, o);
      Outcome clean = scenario(a, *dev);
      EXPECT_EQ(clean.ooms, 0) << "the scenario fits without faults";
    }
    for (auto op : {FaultOp::kAllocate, FaultOp::kMap, FaultOp::kReserve})
      clean_calls[static_cast<int>(op)] = dev->calls(op);
    EXPECT_EQ(dev->outstanding_bytes(), 0u);
  }
  int runs = 0;
  for (auto op : {FaultOp::kAllocate, FaultOp::kMap, FaultOp::kReserve}) {
    for (std::uint64_t n = 0; n < clean_calls[static_cast<int>(op)]; ++n) {
      for (bool persistent : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op) << " call " << n
                                          << (persistent ? " and later" : " only"));
        auto dev = make([=](FaultOp o2, std::uint64_t k) {
          return o2 == op && (persistent ? k >= n : k == n);
        });
        {
          CachingAllocator a(dev, o);
          Outcome r = scenario(a, *dev);
          EXPECT_GE(r.ooms, persistent ? 1 : 0);
          dev->set_predicate(nullptr);
          void* p = a.allocate(4 * kMiB);  // still works once the device does
          a.deallocate(p);
        }
        EXPECT_EQ(dev->outstanding_bytes(), 0u);
        EXPECT_EQ(dev->outstanding_reservations(), 0u);
        EXPECT_EQ(dev->bad_calls(), 0u);
        EXPECT_GE(dev->injected_failures(), 1u);
        ++runs;
      }
    }
  }
  EXPECT_GT(runs, 10);
}

TEST(CachingFaults, FixedSegmentsSurviveEveryFailingCall) {
  run_all_faults(false);
}

TEST(ExpandableFaults, ExpandableSegmentsSurviveEveryFailingCall) {
  run_all_faults(true);
}

}  // namespace
}  // namespace modelmem::alloc

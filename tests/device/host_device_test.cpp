#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/device/limited.hpp"
#include "support/faulty_device.hpp"

namespace modelmem::device {
namespace {

TEST(HostDevice, AllocateWriteFree) {
  auto dev = make_host_device();
  EXPECT_EQ(dev->name(), "host:0");
  void* p = dev->allocate(100000);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0xab, 100000);
  EXPECT_EQ(static_cast<unsigned char*>(p)[99999], 0xab);
  dev->deallocate(p, 100000);
  EXPECT_THROW(dev->allocate(0), InvalidInput);
}

TEST(HostDevice, MemoryInfoIsThePhysicalMemory) {
  auto info = make_host_device()->memory_info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);
}

TEST(HostDevice, ReserveMapUnmap) {
  auto dev = make_host_device({.index = 3});
  EXPECT_EQ(dev->name(), "host:3");
  ASSERT_TRUE(dev->probe_virtual_memory().supported);
  const std::size_t page = dev->granularity();
  ASSERT_GT(page, 0u);
  auto* base = static_cast<char*>(dev->reserve(8 * page));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % page, 0u);
  dev->map(base + 2 * page, 2 * page);
  std::memset(base + 2 * page, 7, 2 * page);
  EXPECT_EQ(base[3 * page + 5], 7);
  dev->unmap(base + 2 * page, 2 * page);
  dev->map(base + 2 * page, page);
  EXPECT_EQ(base[2 * page + 5], 0) << "pages come back zeroed after unmap";
  dev->unmap(base + 2 * page, page);
  EXPECT_THROW(dev->map(base + 1, page), InvalidInput);
  EXPECT_THROW(dev->map(base, page + 1), InvalidInput);
  dev->release(base, 8 * page);
}

TEST(HostDevice, HugePagesFallBackAndAlignTo2MiB) {
  auto dev = make_host_device({.huge_pages = true, .prefault = true});
  EXPECT_EQ(dev->granularity(), 2u << 20);
  void* p = dev->allocate(4u << 20);  // works with or without reserved huge pages
  std::memset(p, 1, 4u << 20);
  dev->deallocate(p, 4u << 20);
  void* q = dev->allocate(12345);  // not a huge-page multiple: normal pages
  std::memset(q, 1, 12345);
  dev->deallocate(q, 12345);
  auto* base = static_cast<char*>(dev->reserve(3 * (2u << 20)));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % (2u << 20), 0u);
  dev->map(base, 2u << 20);
  base[100] = 1;
  dev->unmap(base, 2u << 20);
  dev->release(base, 3 * (2u << 20));
}

// The VmFlags of the mapping that holds `addr` in /proc/self/smaps (empty when not found).
std::vector<std::string> vm_flags_at(const void* addr) {
  std::vector<std::string> flags;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return flags;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  bool inside = false;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo <= a && a < hi;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      std::istringstream words(line + 8);
      for (std::string w; words >> w;) flags.push_back(w);
    }
  }
  std::fclose(f);
  return flags;
}

bool has_flag(const std::vector<std::string>& flags, const char* flag) {
  for (const auto& f : flags)
    if (f == flag) return true;
  return false;
}

TEST(HostDevice, PreferLargePagesAdvisesTheWholeHugePagesOfTheRange) {
  const std::string mode = transparent_huge_pages_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable")
      << mode;
  constexpr std::size_t kHuge = 2u << 20;
  auto dev = make_host_device();
  auto* p = static_cast<char*>(dev->allocate(3 * kHuge));  // holds a whole 2 MiB page at least
  auto* first =
      reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) / kHuge * kHuge);
  ASSERT_FALSE(vm_flags_at(first).empty()) << "no VmFlags in /proc/self/smaps";
  EXPECT_FALSE(has_flag(vm_flags_at(first), "hg"));
  // A range without a whole 2 MiB page is not advised at all.
  EXPECT_FALSE(dev->prefer_large_pages(first, kHuge - 4096));
  EXPECT_FALSE(has_flag(vm_flags_at(first), "hg"));
  const bool taken = dev->prefer_large_pages(p, 3 * kHuge);
  if (mode == "unavailable") {
    EXPECT_FALSE(taken);
  } else {
    ASSERT_TRUE(taken);
    EXPECT_TRUE(has_flag(vm_flags_at(first), "hg"));
    if (first > p) {  // before the first whole page
      EXPECT_FALSE(has_flag(vm_flags_at(p), "hg"));
    }
  }
  std::memset(p, 1, 3 * kHuge);
  const std::size_t in_huge = huge_page_bytes(p, 3 * kHuge);
  EXPECT_EQ(in_huge % kHuge, 0u);
  // Under "madvise" only advised mappings get huge pages, and the advised part of this one is a
  // mapping of its own (its flags differ from its neighbours').
  if (mode == "madvise") {
    EXPECT_LE(in_huge, 3 * kHuge);
  }
  if (mode == "never" || mode == "unavailable") {
    EXPECT_EQ(in_huge, 0u);
  }
  // A limited device passes the hint to the device under it.
  auto limited = make_limited_device(dev, 8 * kHuge);
  EXPECT_EQ(limited->prefer_large_pages(p, 3 * kHuge), taken);
  dev->deallocate(p, 3 * kHuge);
}

TEST(LimitedDevice, CapacityIsEnforcedAndReported) {
  auto dev = make_limited_device(make_host_device(), 1u << 20, false, 2);
  EXPECT_EQ(dev->name(), "limited:2");
  void* a = dev->allocate(700u << 10);
  EXPECT_EQ(dev->memory_info().total, 1u << 20);
  EXPECT_EQ(dev->memory_info().free, (1u << 20) - (700u << 10));
  try {
    dev->allocate(400u << 10);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().requested, 400u << 10);
    EXPECT_EQ(e.info().device_free, (1u << 20) - (700u << 10));
    EXPECT_NE(std::string(e.what()).find("limited:2"), std::string::npos) << e.what();
  }
  dev->deallocate(a, 700u << 10);
  EXPECT_EQ(dev->memory_info().free, 1u << 20);
  void* b = dev->allocate(1u << 20);
  dev->deallocate(b, 1u << 20);
}

TEST(LimitedDevice, WithoutVirtualMemory) {
  auto dev = make_limited_device(make_host_device(), 64u << 20);
  VmProbe probe = dev->probe_virtual_memory();
  EXPECT_FALSE(probe.supported);
  EXPECT_EQ(probe.reason, "no virtual memory");
  EXPECT_EQ(dev->granularity(), 0u);
  EXPECT_THROW(dev->reserve(4096), Unsupported);
  EXPECT_THROW(dev->map(nullptr, 4096), Unsupported);
}

TEST(LimitedDevice, WithVirtualMemoryMapsCountAgainstCapacity) {
  auto host = make_host_device();
  const std::size_t page = host->granularity();
  auto dev = make_limited_device(host, 3 * page, true);
  ASSERT_TRUE(dev->probe_virtual_memory().supported);
  auto* base = static_cast<char*>(dev->reserve(16 * page));  // address space is free
  EXPECT_EQ(dev->memory_info().free, 3 * page);
  dev->map(base, 2 * page);
  EXPECT_EQ(dev->memory_info().free, page);
  EXPECT_THROW(dev->map(base + 2 * page, 2 * page), OutOfMemory);
  EXPECT_EQ(dev->memory_info().free, page) << "a failed map takes nothing";
  dev->unmap(base, 2 * page);
  EXPECT_EQ(dev->memory_info().free, 3 * page);
  dev->release(base, 16 * page);
}

TEST(FaultyDevice, FailsChosenCallsAndKeepsALedger) {
  auto faulty = make_faulty_device(make_host_device(), [](FaultOp op, std::uint64_t n) {
    return (op == FaultOp::kAllocate && n == 1) || (op == FaultOp::kMap && n >= 2);
  });
  EXPECT_EQ(faulty->name(), "faulty(host:0)");
  void* a = faulty->allocate(4096);
  EXPECT_THROW(faulty->allocate(4096), OutOfMemory);
  void* c = faulty->allocate(8192);
  EXPECT_EQ(faulty->outstanding_bytes(), 4096u + 8192u);
  EXPECT_EQ(faulty->calls(FaultOp::kAllocate), 3u);

  const std::size_t page = faulty->granularity();
  auto* base = static_cast<char*>(faulty->reserve(4 * page));
  faulty->map(base, page);
  faulty->map(base + page, page);
  EXPECT_THROW(faulty->map(base + 2 * page, page), OutOfMemory);  // every map after 2 fails
  EXPECT_EQ(faulty->injected_failures(), 2u);
  EXPECT_EQ(faulty->outstanding_bytes(), 4096u + 8192u + 2 * page);

  faulty->unmap(base, 2 * page);
  faulty->release(base, 4 * page);
  faulty->deallocate(a, 4096);
  faulty->deallocate(c, 8192);
  EXPECT_EQ(faulty->outstanding_bytes(), 0u);
  EXPECT_EQ(faulty->outstanding_reservations(), 0u);
  EXPECT_EQ(faulty->bad_calls(), 0u);

  faulty->deallocate(a, 4096);  // double free: recorded, not passed on
  faulty->unmap(base, page);    // not mapped
  EXPECT_EQ(faulty->bad_calls(), 2u);
}

}  // namespace
}  // namespace modelmem::device

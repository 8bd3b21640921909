// The ACL device on the emulated runtime: loading, plain memory, OOM numbers, the current
// device, the virtual-memory probe in all three cases and mapping by granules.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "acl/emulation.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/acl.hpp"

namespace modelmem::device {
namespace {

using testing::Emulation;
TEST(AclRuntime, NoLibraryMeansNoAscendRuntimeHere) {
  setenv("MODELMEM_ACL_LIBRARY", "/nonexistent/libascendcl.so", 1);
  AclAvailability a = acl_availability();
  EXPECT_FALSE(a.available);
  EXPECT_NE(a.reason.find("no Ascend runtime here"), std::string::npos) << a.reason;
  EXPECT_NE(a.reason.find("/nonexistent/libascendcl.so"), std::string::npos) << a.reason;
  try {
    make_acl_device(0);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("npu:0: no Ascend runtime here"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(acl_device_memory().empty());
  EXPECT_EQ(acl_current_device(), -1);
}

TEST(AclRuntime, AFrameworksEarlierAclInitIsFine) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_DEVICES", "2"}});
  auto init = emu.function<int (*)(const char*)>("aclInit");
  ASSERT_EQ(init(nullptr), 0);  // the framework initialises first
  AclAvailability a = acl_availability();
  ASSERT_TRUE(a.available) << a.reason;
  EXPECT_EQ(a.device_count, 2);
  EXPECT_EQ(a.library, MODELMEM_EMULATED_ACL);
  EXPECT_EQ(emu.calls("aclInit"), 2u);  // modelmem's own call got 100002 and went on
  EXPECT_THROW(make_acl_device(2), Unsupported);
  EXPECT_EQ(make_acl_device(1)->name(), "npu:1");
}

TEST(AclRuntime, AFailingAclInitIsReportedWithItsCode) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_FAIL", "aclInit:1:507000"}});
  emu.reset();
  AclAvailability a = acl_availability();
  EXPECT_FALSE(a.available);
  EXPECT_NE(a.reason.find("aclInit returned 507000"), std::string::npos) << a.reason;
}

TEST(AclDevice, PlainMemoryIs512ByteAlignedAndComesBack) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "64"}});
  auto dev = make_acl_device(0);
  EXPECT_EQ(dev->name(), "npu:0");
  MemoryInfo before = dev->memory_info();
  EXPECT_EQ(before.total, 64 * kMiB);
  EXPECT_EQ(before.free, 64 * kMiB);
  void* p = dev->allocate(1000);
  void* q = dev->allocate(3 * kMiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(q) % 512, 0u);
  std::memset(p, 1, 1000);
  std::memset(q, 2, 3 * kMiB);
  // aclrtMallocAlign32 with huge-first: no padding, 480 bytes of alignment slack.
  EXPECT_EQ(emu.calls("aclrtMallocAlign32"), 2u);
  EXPECT_EQ(emu.calls("aclrtMallocAlign32/policy0"), 2u);  // ACL_MEM_MALLOC_HUGE_FIRST
  EXPECT_EQ(emu.calls("aclrtMalloc"), 0u);
  EXPECT_EQ(dev->memory_info().free, 64 * kMiB - (1000 + 480 + 24) - (3 * kMiB + 480));
  EXPECT_THROW(dev->allocate(0), InvalidInput);
  dev->deallocate(p, 1000);
  dev->deallocate(q, 3 * kMiB);
  EXPECT_EQ(dev->memory_info().free, 64 * kMiB);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, WithoutAclrtMallocAlign32ItUsesAclrtMalloc) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_HIDE", "aclrtMallocAlign32"}});
  auto dev = make_acl_device(0);
  void* p = dev->allocate(4096);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(emu.calls("aclrtMalloc"), 1u);
  EXPECT_EQ(emu.calls("aclrtMalloc/policy0"), 1u);
  EXPECT_EQ(emu.calls("aclrtMallocAlign32"), 0u);
  // aclrtMalloc charges 32 bytes of padding beyond the 32-byte aligned size.
  EXPECT_EQ(emu.state().used_bytes, 4096u + 480 + 32);
  dev->deallocate(p, 4096);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, OutOfMemoryCarriesTheNumbers) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "16"}});
  auto dev = make_acl_device(0);
  void* p = dev->allocate(10 * kMiB);
  try {
    dev->allocate(8 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().requested, 8 * kMiB);
    EXPECT_EQ(e.info().device_free, 16 * kMiB - 10 * kMiB - 480);
    EXPECT_NE(e.info().where.find("npu:0 (aclrtMallocAlign32 returned 207001"), std::string::npos)
        << e.info().where;
    EXPECT_NE(std::string(e.what()).find("8.00 MiB"), std::string::npos) << e.what();
  }
  dev->deallocate(p, 10 * kMiB);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, OtherCodesNameTheFunctionAndTheCode) {
  Emulation emu;
  auto dev = make_acl_device(0);
  emu.fail("aclrtMallocAlign32", 1, 507899);
  try {
    dev->allocate(1024);
    FAIL() << "expected Error";
  } catch (const OutOfMemory&) {
    FAIL() << "507899 is no out-of-memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("npu:0: aclrtMallocAlign32 returned 507899"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, TheDeviceIsMadeCurrentOnEachThreadAndTheCallersIsRestored) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_DEVICES", "2"}});
  auto dev1 = make_acl_device(1);
  auto set = emu.function<int (*)(std::int32_t)>("aclrtSetDevice");
  auto get = emu.function<int (*)(std::int32_t*)>("aclrtGetDevice");
  ASSERT_EQ(set(0), 0);  // the caller works on npu:0
  void* p = dev1->allocate(4096);
  std::int32_t now = -1;
  ASSERT_EQ(get(&now), 0);
  EXPECT_EQ(now, 0);
  // A fresh thread with no device set (the emulation refuses memory calls there).
  std::thread([&] {
    void* q = dev1->allocate(8192);
    dev1->deallocate(q, 8192);
  }).join();
  dev1->deallocate(p, 4096);
  EXPECT_EQ(acl_current_device(), 0);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, ProbeWithVirtualMemoryPresentReservesLikeTorchNpu) {
  Emulation emu;
  auto dev = make_acl_device(0);
  VmProbe p = dev->probe_virtual_memory();
  EXPECT_TRUE(p.supported) << p.reason;
  EXPECT_EQ(emu.calls("aclrtReserveMemAddress"), 1u);
  EXPECT_EQ(emu.calls("aclrtReleaseMemAddress"), 1u);
  EXPECT_EQ(dev->granularity(), 2 * kMiB);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, ProbeWithVirtualMemoryUnsupportedNames207000) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_VMM", "unsupported"}});
  VmProbe p = make_acl_device(0)->probe_virtual_memory();
  EXPECT_FALSE(p.supported);
  EXPECT_NE(p.reason.find("aclrtReserveMemAddress returned 207000"), std::string::npos) << p.reason;
}

TEST(AclDevice, ProbeWithVirtualMemoryAbsentNamesTheMissingSymbol) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_VMM", "absent"}});
  auto dev = make_acl_device(0);
  VmProbe p = dev->probe_virtual_memory();
  EXPECT_FALSE(p.supported);
  EXPECT_NE(p.reason.find("lacks aclrtReserveMemAddress"), std::string::npos) << p.reason;
  EXPECT_EQ(dev->granularity(), 0u);
  EXPECT_THROW(dev->reserve(2 * kMiB), Unsupported);
  EXPECT_EQ(emu.calls("aclrtReserveMemAddress"), 0u);
}

TEST(AclDevice, ProbeWithAnotherCodeIsAnError) {
  Emulation emu;
  auto dev = make_acl_device(0);
  emu.fail("aclrtReserveMemAddress", 1, 507899);
  try {
    dev->probe_virtual_memory();
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aclrtReserveMemAddress returned 507899"),
              std::string::npos)
        << e.what();
  }
}

TEST(AclDevice, WithoutTheGranularityQueryPagesAre2MiB) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_HIDE", "aclrtMemGetAllocationGranularity"}});
  auto dev = make_acl_device(0);
  EXPECT_TRUE(dev->probe_virtual_memory().supported);
  EXPECT_EQ(dev->granularity(), 2 * kMiB);
  EXPECT_EQ(emu.calls("aclrtMemGetAllocationGranularity"), 0u);
}

TEST(AclDevice, MapsOneGranulePerCallAndUnmapsAnyGranuleRangeAfterSynchronising) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "32"}});
  auto dev = make_acl_device(0);
  const std::size_t g = dev->granularity();
  void* base = dev->reserve(8 * g);
  auto* b = static_cast<char*>(base);
  dev->map(b, 4 * g);
  EXPECT_EQ(emu.calls("aclrtMallocPhysical"), 4u);
  EXPECT_EQ(emu.calls("aclrtMapMem"), 4u);
  std::memset(b, 7, 4 * g);
  EXPECT_EQ(dev->memory_info().free, 32 * kMiB - 4 * g);
  const auto syncs = emu.calls("aclrtSynchronizeDevice");
  dev->unmap(b + g, 2 * g);  // the middle of one map call
  EXPECT_EQ(emu.calls("aclrtSynchronizeDevice"), syncs + 1);
  EXPECT_EQ(emu.calls("aclrtUnmapMem"), 2u);
  EXPECT_EQ(b[0], 7);
  EXPECT_EQ(b[3 * g], 7);
  EXPECT_THROW(dev->map(b + 3 * g, g), InvalidInput);  // still mapped
  EXPECT_THROW(dev->map(b + 1, g), InvalidInput);      // not granule-aligned
  dev->release(base, 8 * g);                           // unmaps what is left
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, PhysicalOutOfMemoryLeavesNothingMappedFromTheCall) {
  Emulation emu({{"MODELMEM_EMULATED_ACL_MEMORY_MB", "8"}});
  auto dev = make_acl_device(0);
  const std::size_t g = dev->granularity();
  void* base = dev->reserve(8 * g);
  try {
    dev->map(base, 6 * g);  // 12 MiB on an 8 MiB device
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.info().requested, 6 * g);
    EXPECT_EQ(e.info().device_free, 8 * kMiB);  // the granules of this call were given back
    EXPECT_NE(e.info().where.find("aclrtMallocPhysical returned 207001"), std::string::npos);
  }
  EXPECT_EQ(emu.state().physical_handles, 0u);
  EXPECT_EQ(emu.state().mappings, 0u);
  dev->map(base, 4 * g);
  dev->release(base, 8 * g);
  EXPECT_TRUE(emu.holds_nothing());
}

TEST(AclDevice, MemoryOfEveryNpuForInfo) {
  Emulation emu(
      {{"MODELMEM_EMULATED_ACL_DEVICES", "3"}, {"MODELMEM_EMULATED_ACL_MEMORY_MB", "256"}});
  auto mem = acl_device_memory();
  ASSERT_EQ(mem.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(mem[i].index, i);
    EXPECT_EQ(mem[i].total, 256 * kMiB);
    EXPECT_EQ(mem[i].free, 256 * kMiB);
    EXPECT_EQ(mem[i].soc, "Ascend-emulated");
    EXPECT_TRUE(mem[i].error.empty()) << mem[i].error;
  }
  EXPECT_EQ(acl_current_device(), -1);  // the query gave every device back
}

}  // namespace
}  // namespace modelmem::device

// The NPU device: plain segments from aclrtMallocAlign32, memory info from aclrtGetMemInfo,
// virtual memory through aclrtReserveMemAddress / aclrtMallocPhysical / aclrtMapMem.
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "device/acl/acl_runtime.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/acl.hpp"

namespace modelmem::device {
namespace {

using namespace acl;

// Segments are handed out 512-byte aligned (what the strategies above promise); the runtime
// guarantees 32, so this much more is asked for and the block aligned inside it.
constexpr std::size_t kAlign = 512;
constexpr std::size_t kSlack = kAlign - 32;

// The probe's reservation, as torch_npu makes it.
constexpr std::size_t kProbeBytes = 512;

class AclDevice final : public Device {
 public:
  AclDevice(std::shared_ptr<const Runtime> rt, int index)
      : rt_(std::move(rt)), index_(index), name_("npu:" + std::to_string(index)) {}

  ~AclDevice() override {
    // Whatever is still mapped when the device goes (the strategies should hold nothing).
    std::lock_guard lock(mu_);
    if (pages_.empty()) return;
    DeviceScope scope(*rt_, index_);
    rt_->synchronize_device();
    for (auto& [addr, handle] : pages_) {
      rt_->unmap(reinterpret_cast<void*>(addr));
      rt_->free_physical(handle);
    }
  }

  std::string name() const override { return name_; }

  // The slack asked for, the runtime's rounding to 32 bytes and aclrtMalloc's 32-byte padding.
  std::size_t allocation_overhead() const noexcept override {
    return kSlack + 32 + (rt_->malloc_align32 ? 0 : 32);
  }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) throw InvalidInput(name_ + ": allocation of 0 bytes");
    const std::size_t ask = checked_add(bytes, kSlack, "npu allocation");
    const auto fn = rt_->malloc_align32 ? rt_->malloc_align32 : rt_->malloc;
    void* raw = nullptr;
    {
      DeviceScope scope(*rt_, index_);
      check_scope(scope);
      // Huge-first: requests over 1 MB in 2 MB pages where the device has them.
      Status r = fn(&raw, ask, kHugeFirst);
      if (r == kSuccess && raw == nullptr)
        throw_oom(bytes, std::string(rt_->malloc_name()) + " returned a null address");
      if (r == kMemoryAllocation) throw_oom(bytes, call_error(rt_->malloc_name(), r));
      if (r != kSuccess)
        throw Error(name_ + ": " + call_error(rt_->malloc_name(), r) + " for " + format_bytes(ask));
    }
    const auto p = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (p + kAlign - 1) & ~(kAlign - 1);
    if (aligned != p) {
      std::lock_guard lock(mu_);
      shifted_[aligned] = p;
    }
    return reinterpret_cast<void*>(aligned);
  }

  void deallocate(void* ptr, std::size_t) noexcept override {
    if (ptr == nullptr) return;
    void* raw = ptr;
    {
      std::lock_guard lock(mu_);
      if (auto it = shifted_.find(reinterpret_cast<std::uintptr_t>(ptr)); it != shifted_.end()) {
        raw = reinterpret_cast<void*>(it->second);
        shifted_.erase(it);
      }
    }
    DeviceScope scope(*rt_, index_);
    // A failed free is retried once (a transient runtime error must not leak the segment).
    Status r = rt_->free(raw);
    if (r != kSuccess) r = rt_->free(raw);
    if (r != kSuccess) report(call_error("aclrtFree", r));
  }

  MemoryInfo memory_info() const override {
    DeviceScope scope(*rt_, index_);
    if (scope.status() != kSuccess) return {};
    std::size_t free_bytes = 0, total = 0;
    if (rt_->mem_info(kHbmMem, &free_bytes, &total) != kSuccess) return {};
    return {free_bytes, total};
  }

  VmProbe probe_virtual_memory() override {
    if (!rt_->missing_vmm.empty())
      return {false, rt_->path + " lacks " + rt_->missing_vmm +
                         " (CANN before 7.0; expandable segments need 7.0 or later)"};
    DeviceScope scope(*rt_, index_);
    check_scope(scope);
    void* p = nullptr;
    Status r = rt_->reserve(&p, kProbeBytes, 0, nullptr, 1);
    if (r == kSuccess) {
      if (rt_->release(p) != kSuccess && rt_->release(p) != kSuccess)
        report("aclrtReleaseMemAddress failed twice on the probe's reservation");
      return {true, ""};
    }
    if (r == kFeatureNotSupported)
      return {false, call_error("aclrtReserveMemAddress", r) +
                         ": the driver and firmware may not match the CANN toolkit; install "
                         "the ones released with it"};
    // As torch_npu: any other answer is a broken runtime, not an absent feature.
    throw Error(name_ +
                ": virtual-memory probe failed: " + call_error("aclrtReserveMemAddress", r));
  }

  std::size_t granularity() const override {
    if (!rt_->missing_vmm.empty()) return 0;
    std::call_once(granularity_once_, [this] {
      granularity_ = kDefaultGranularity;
      if (rt_->granularity == nullptr) return;  // before CANN 8.0: 2 MiB
      DeviceScope scope(*rt_, index_);
      PhysicalMemProp prop = physical_prop();
      std::size_t g = 0;
      if (rt_->granularity(&prop, kGranularityMinimum, &g) == kSuccess && g != 0) granularity_ = g;
    });
    return granularity_;
  }

  void* reserve(std::size_t bytes) override {
    need_vmm();
    check_aligned(nullptr, bytes, "reserve");
    DeviceScope scope(*rt_, index_);
    check_scope(scope);
    void* p = nullptr;
    Status r = rt_->reserve(&p, bytes, 0, nullptr, 0);
    if (r == kMemoryAllocation || r == kOverLimit)
      throw_oom(bytes, call_error("aclrtReserveMemAddress", r));
    if (r == kFeatureNotSupported)
      throw Unsupported(name_ + ": " + call_error("aclrtReserveMemAddress", r));
    if (r != kSuccess || p == nullptr)
      throw Error(name_ + ": " + call_error("aclrtReserveMemAddress", r) + " for " +
                  format_bytes(bytes));
    return p;
  }

  void release(void* base, std::size_t bytes) noexcept override {
    if (base == nullptr || !rt_->missing_vmm.empty()) return;
    unmap(base, bytes);  // anything still mapped inside; normally nothing
    DeviceScope scope(*rt_, index_);
    Status r = rt_->release(base);
    if (r != kSuccess) r = rt_->release(base);
    if (r != kSuccess) report(call_error("aclrtReleaseMemAddress", r));
  }

  void map(void* addr, std::size_t bytes) override {
    need_vmm();
    check_aligned(addr, bytes, "map");
    const std::size_t g = granularity();
    const auto base = reinterpret_cast<std::uintptr_t>(addr);
    const PhysicalMemProp prop = physical_prop();
    DeviceScope scope(*rt_, index_);
    check_scope(scope);
    std::lock_guard lock(mu_);
    std::size_t done = 0;
    auto undo = [&] {
      for (std::size_t off = 0; off < done; off += g) {
        auto it = pages_.find(base + off);
        rt_->unmap(reinterpret_cast<void*>(it->first));
        rt_->free_physical(it->second);
        pages_.erase(it);
      }
    };
    for (; done < bytes; done += g) {
      if (pages_.count(base + done) != 0) {
        undo();
        throw InvalidInput(name_ + ": map over a mapped page at " + std::to_string(base + done));
      }
      void* handle = nullptr;
      Status r = rt_->malloc_physical(&handle, g, &prop, 0);
      if (r != kSuccess || handle == nullptr) {
        undo();
        if (r == kSuccess) throw_oom(bytes, "aclrtMallocPhysical returned a null handle");
        if (r == kMemoryAllocation) throw_oom(bytes, call_error("aclrtMallocPhysical", r));
        throw Error(name_ + ": " + call_error("aclrtMallocPhysical", r));
      }
      r = rt_->map(reinterpret_cast<void*>(base + done), g, 0, handle, 0);
      if (r != kSuccess) {
        rt_->free_physical(handle);
        undo();
        if (r == kMemoryAllocation) throw_oom(bytes, call_error("aclrtMapMem", r));
        throw Error(name_ + ": " + call_error("aclrtMapMem", r));
      }
      pages_.emplace(base + done, handle);
    }
  }

  void unmap(void* addr, std::size_t bytes) noexcept override {
    if (!rt_->missing_vmm.empty() || bytes == 0) return;
    const auto base = reinterpret_cast<std::uintptr_t>(addr);
    DeviceScope scope(*rt_, index_);
    std::lock_guard lock(mu_);
    auto it = pages_.lower_bound(base);
    if (it == pages_.end() || it->first >= base + bytes) return;
    // Work queued on any stream may still use these pages.
    if (Status r = rt_->synchronize_device(); r != kSuccess)
      report(call_error("aclrtSynchronizeDevice", r) + " before unmapping");
    while (it != pages_.end() && it->first < base + bytes) {
      // Each call is retried once: a page that stays mapped is kept and tried again at the end.
      void* va = reinterpret_cast<void*>(it->first);
      Status r = rt_->unmap(va);
      if (r != kSuccess) r = rt_->unmap(va);
      if (r != kSuccess) {
        report(call_error("aclrtUnmapMem", r));
        ++it;
        continue;
      }
      r = rt_->free_physical(it->second);
      if (r != kSuccess) r = rt_->free_physical(it->second);
      if (r != kSuccess) report(call_error("aclrtFreePhysical", r));
      it = pages_.erase(it);
    }
  }

 private:
  PhysicalMemProp physical_prop() const {
    PhysicalMemProp prop{};
    prop.handle_type = 0;
    prop.allocation_type = 0;
    prop.mem_attr = kHbmMemHuge;
    prop.location.id = static_cast<std::uint32_t>(index_);
    prop.location.type = kLocationDevice;
    return prop;
  }

  void check_scope(const DeviceScope& scope) const {
    if (scope.status() != kSuccess)
      throw Error(name_ + ": " + call_error("aclrtSetDevice", scope.status()));
  }

  void need_vmm() const {
    if (!rt_->missing_vmm.empty())
      throw Unsupported(name_ + ": " + rt_->path + " lacks " + rt_->missing_vmm);
  }

  void check_aligned(void* addr, std::size_t bytes, const char* what) const {
    const std::size_t g = granularity();
    if (bytes == 0 || bytes % g != 0 || reinterpret_cast<std::uintptr_t>(addr) % g != 0)
      throw InvalidInput(name_ + ": " + what + " of " + std::to_string(bytes) +
                         " bytes is not a multiple of the granularity " + std::to_string(g));
  }

  [[noreturn]] void throw_oom(std::size_t bytes, const std::string& call) const {
    OomInfo info;
    info.requested = bytes;
    info.device_free = memory_info().free;
    info.where = name_ + " (" + call + ")";
    throw OutOfMemory(info);
  }

  void report(const std::string& what) const noexcept {
    std::fprintf(stderr, "modelmem: %s: %s\n", name_.c_str(), what.c_str());
  }

  std::shared_ptr<const Runtime> rt_;
  int index_;
  std::string name_;
  mutable std::once_flag granularity_once_;
  mutable std::size_t granularity_ = 0;
  std::mutex mu_;
  std::map<std::uintptr_t, std::uintptr_t> shifted_;  // aligned segment -> runtime's address
  std::map<std::uintptr_t, void*> pages_;             // mapped granule -> physical handle
};

}  // namespace

AclAvailability acl_availability() noexcept {
  AclAvailability a;
  try {
    auto rt = acl::runtime(a.reason);
    if (!rt) return a;
    a.library = rt->path;
    std::uint32_t count = 0;
    if (Status r = rt->device_count(&count); r != kSuccess) {
      a.reason = "Ascend runtime " + rt->path + ": " + call_error("aclrtGetDeviceCount", r);
      return a;
    }
    if (count == 0) {
      a.reason = "no NPU (the Ascend runtime " + rt->path + " reports 0 devices)";
      return a;
    }
    a.available = true;
    a.device_count = static_cast<int>(count);
  } catch (const std::exception& e) {
    a.reason = e.what();
  }
  return a;
}

DevicePtr make_acl_device(int index) {
  const std::string name = "npu:" + std::to_string(index);
  std::string why;
  auto rt = acl::runtime(why);
  if (!rt) throw Unsupported(name + ": " + why);
  std::uint32_t count = 0;
  if (Status r = rt->device_count(&count); r != kSuccess)
    throw Unsupported(name + ": " + call_error("aclrtGetDeviceCount", r));
  if (index < 0 || static_cast<std::uint32_t>(index) >= count)
    throw Unsupported(name + ": no such device (" + std::to_string(count) + " present)");
  return std::make_shared<AclDevice>(std::move(rt), index);
}

std::vector<AclDeviceMemory> acl_device_memory() {
  std::vector<AclDeviceMemory> out;
  std::string why;
  auto rt = acl::runtime(why);
  if (!rt) return out;
  std::uint32_t count = 0;
  if (rt->device_count(&count) != kSuccess) return out;
  for (std::uint32_t i = 0; i < count; ++i) {
    AclDeviceMemory m;
    m.index = static_cast<int>(i);
    std::int32_t before = -1;
    if (rt->get_device(&before) != kSuccess) before = -1;
    {
      DeviceScope scope(*rt, m.index);
      if (scope.status() != kSuccess) {
        m.error = call_error("aclrtSetDevice", scope.status());
      } else if (Status r = rt->mem_info(kHbmMem, &m.free, &m.total); r != kSuccess) {
        m.error = call_error("aclrtGetMemInfo", r);
      }
      if (rt->soc_name != nullptr)
        if (const char* soc = rt->soc_name()) m.soc = soc;
    }
    // The query set the device only to ask: give the context back unless the thread had it.
    if (before != m.index && rt->reset_device != nullptr) rt->reset_device(m.index);
    out.push_back(std::move(m));
  }
  return out;
}

int acl_current_device() noexcept {
  std::string why;
  auto rt = acl::runtime(why);
  if (!rt) return -1;
  std::int32_t d = -1;
  return rt->get_device(&d) == kSuccess ? d : -1;
}

bool acl_synchronize(int index) noexcept {
  std::string why;
  auto rt = acl::runtime(why);
  if (!rt || rt->synchronize_device == nullptr) return false;
  DeviceScope scope(*rt, index);
  return scope.status() == kSuccess && rt->synchronize_device() == kSuccess;
}

}  // namespace modelmem::device

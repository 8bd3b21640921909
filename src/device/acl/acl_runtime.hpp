// The CANN runtime as modelmem sees it: libascendcl.so opened once, its functions resolved by
// name. Internal to the ACL device (src/device/acl/).
#pragma once

#include <memory>
#include <string>

#include "device/acl/acl_api.hpp"

namespace modelmem::device::acl {

struct Runtime {
  std::string path;
  // Required: without them the runtime is unusable.
  InitFn init = nullptr;
  SetDeviceFn set_device = nullptr;
  GetDeviceFn get_device = nullptr;
  GetDeviceCountFn device_count = nullptr;
  MallocFn malloc = nullptr;
  FreeFn free = nullptr;
  GetMemInfoFn mem_info = nullptr;
  // Optional.
  MallocFn malloc_align32 = nullptr;  // absent: aclrtMalloc (32 bytes of padding per block)
  ResetDeviceFn reset_device = nullptr;
  SynchronizeDeviceFn synchronize_device = nullptr;
  GetSocNameFn soc_name = nullptr;
  // Virtual memory (CANN 7.0 and later); all or nothing, see missing_vmm.
  ReserveMemAddressFn reserve = nullptr;
  ReleaseMemAddressFn release = nullptr;
  MallocPhysicalFn malloc_physical = nullptr;
  FreePhysicalFn free_physical = nullptr;
  MapMemFn map = nullptr;
  UnmapMemFn unmap = nullptr;
  GetGranularityFn granularity = nullptr;  // CANN 8.0; absent: kDefaultGranularity
  std::string missing_vmm;                 ///< first virtual-memory function absent; "" = all there

  const char* malloc_name() const { return malloc_align32 ? "aclrtMallocAlign32" : "aclrtMalloc"; }
};

/// The runtime, loaded (and aclInit called) on first use and shared while anything holds it; a
/// later call after every holder is gone resolves the functions again. Null with `why` set when
/// there is none ("no Ascend runtime here (...)").
std::shared_ptr<const Runtime> runtime(std::string& why);

/// "aclrtMapMem returned 507899 (driver internal error)".
std::string call_error(const char* function, Status code);

/// Makes `index` current on the calling thread for the scope and restores the caller's device
/// afterwards (frameworks keep their own notion of the current device).
class DeviceScope {
 public:
  DeviceScope(const Runtime& rt, int index);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  /// kSuccess, or what aclrtSetDevice returned.
  Status status() const { return status_; }

 private:
  const Runtime& rt_;
  std::int32_t previous_ = -1;
  std::int32_t index_ = 0;
  Status status_ = kSuccess;
};

}  // namespace modelmem::device::acl

// The Ascend NPU device ("npu:N") over the CANN runtime, libascendcl.so, opened with dlopen at
// run time: modelmem builds and starts without the CANN SDK, and says "no Ascend runtime here"
// where there is none. The library is MODELMEM_ACL_LIBRARY when set, else "libascendcl.so"
// (the one a framework already loaded, or the loader's search path), else the usual CANN
// folders ($ASCEND_HOME_PATH/lib64, $ASCEND_TOOLKIT_HOME/lib64,
// /usr/local/Ascend/ascend-toolkit/latest/lib64). Functions are resolved by name; a missing
// optional one means an absent feature (aclrtMallocAlign32 -> aclrtMalloc; the virtual-memory
// functions of CANN 7.0 -> no expandable segments; the granularity query of CANN 8.0 -> 2 MiB).
//
// Segments come from aclrtMallocAlign32 with the huge-first policy and are 512-byte aligned
// (the runtime promises 32: the device asks for 480 bytes more and aligns inside). Virtual
// memory maps one physical granule (2 MiB) per aclrtMallocPhysical + aclrtMapMem, so any
// granule-aligned range can be unmapped later; unmap() and release() synchronise the device
// first (aclrtUnmapMem does not, and queued work may still use the pages). The device is made
// current on the calling thread before every call that needs one, and the caller's current
// device is restored afterwards. Out of memory (207001, or success with a null address)
// throws OutOfMemory with the numbers; any other code an Error naming the function and the
// code. Thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "modelmem/device/device.hpp"

namespace modelmem::device {

/// Whether an Ascend runtime can be used here (opening it calls aclInit; a framework's earlier
/// aclInit, code 100002, is fine).
struct AclAvailability {
  bool available = false;
  int device_count = 0;
  std::string library;  ///< the path that was opened
  std::string reason;   ///< why not: "no Ascend runtime here (libascendcl.so not found)", ...
};
AclAvailability acl_availability() noexcept;

/// The NPU `index` ("npu:<index>"). Throws Unsupported when there is no runtime or no such
/// device.
DevicePtr make_acl_device(int index = 0);

/// HBM of every NPU, for `modelmem info`. Asking needs the device current on this thread (the
/// runtime then holds a context on it; the query resets the devices it set).
struct AclDeviceMemory {
  int index = 0;
  std::size_t free = 0;
  std::size_t total = 0;
  std::string soc;    ///< aclrtGetSocName, "" when absent
  std::string error;  ///< set when this device could not be asked
};
std::vector<AclDeviceMemory> acl_device_memory();

/// The current device of the calling thread (aclrtGetDevice), or -1 when none is set or there
/// is no runtime. What MindSpore's pluggable functions, which get no device, allocate on.
int acl_current_device() noexcept;

/// Waits for all work queued on the device (aclrtSynchronizeDevice); false when the runtime
/// lacks the function or it fails.
bool acl_synchronize(int index) noexcept;

}  // namespace modelmem::device

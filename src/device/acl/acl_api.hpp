// modelmem's own declarations of the parts of the Ascend CANN runtime (libascendcl.so, "ACL")
// that it uses. No CANN header is needed or used: the runtime is a plain C ABI that torch_npu
// itself opens with dlopen and resolves by name, and so does modelmem. Values and shapes follow
// the public CANN documentation (see docs/ascend.md); every function returns an aclError (int,
// 0 = success). Shared by the ACL device and the emulated runtime of the tests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace modelmem::device::acl {

using Status = int;  // aclError

// Error codes modelmem tells apart.
inline constexpr Status kSuccess = 0;
inline constexpr Status kInvalidParam = 100000;
inline constexpr Status kUninitialized = 100001;
inline constexpr Status kRepeatInitialize = 100002;  // aclInit already called: fine
inline constexpr Status kBadAlloc = 200000;
inline constexpr Status kInvalidDevice = 107001;
inline constexpr Status kNoContext = 107002;  // no device set on the calling thread
inline constexpr Status kFeatureNotSupported = 207000;
inline constexpr Status kMemoryAllocation = 207001;  // out of device memory
inline constexpr Status kMemoryFree = 207002;
inline constexpr Status kOverLimit = 207012;
inline constexpr Status kInternal = 507000;
inline constexpr Status kDriverInternal = 507899;

// aclrtMemMallocPolicy
inline constexpr int kHugeFirst = 0;  // <= 1 MB normal pages, larger in 2 MB pages if any
inline constexpr int kHugeOnly = 1;
inline constexpr int kNormalOnly = 2;
inline constexpr int kLastPolicy = 7;  // 3-5: P2P variants, 6-7: 1 GiB pages

// aclrtMemAttr
inline constexpr int kDdrMem = 0;
inline constexpr int kHbmMem = 1;
inline constexpr int kHbmMemHuge = 4;

// aclrtMemcpyKind
inline constexpr int kHostToHost = 0;
inline constexpr int kHostToDevice = 1;
inline constexpr int kDeviceToHost = 2;
inline constexpr int kDeviceToDevice = 3;

// aclrtMemGranularityOptions
inline constexpr int kGranularityMinimum = 0;
inline constexpr int kGranularityRecommended = 1;

// aclrtMemLocationType
inline constexpr int kLocationHost = 0;
inline constexpr int kLocationDevice = 1;

/// aclrtPhysicalMemProp: what aclrtMallocPhysical is asked for. The location's id comes before
/// its type.
struct MemLocation {
  std::uint32_t id;
  int type;
};
struct PhysicalMemProp {
  int handle_type;      // 0: none
  int allocation_type;  // 0: pinned
  int mem_attr;         // kHbmMemHuge
  MemLocation location;
  std::uint64_t reserve;
};

inline constexpr std::size_t kDefaultGranularity = std::size_t{2} << 20;  // before CANN 8.0

extern "C" {
// Function types, named after the runtime's functions.
using InitFn = Status (*)(const char* config_path);
using SetDeviceFn = Status (*)(std::int32_t device);
using GetDeviceFn = Status (*)(std::int32_t* device);
using GetDeviceCountFn = Status (*)(std::uint32_t* count);
using ResetDeviceFn = Status (*)(std::int32_t device);
using MallocFn = Status (*)(void** ptr, std::size_t size, int policy);
using FreeFn = Status (*)(void* ptr);
using GetMemInfoFn = Status (*)(int attr, std::size_t* free_bytes, std::size_t* total_bytes);
using SynchronizeDeviceFn = Status (*)();
using SynchronizeStreamFn = Status (*)(void* stream);
using GetSocNameFn = const char* (*)();
using ReserveMemAddressFn = Status (*)(void** va, std::size_t size, std::size_t alignment,
                                       void* expected, std::uint64_t flags);
using ReleaseMemAddressFn = Status (*)(void* va);
using MallocPhysicalFn = Status (*)(void** handle, std::size_t size, const PhysicalMemProp* prop,
                                    std::uint64_t flags);
using FreePhysicalFn = Status (*)(void* handle);
using MapMemFn = Status (*)(void* va, std::size_t size, std::size_t offset, void* handle,
                            std::uint64_t flags);
using UnmapMemFn = Status (*)(void* va);
using GetGranularityFn = Status (*)(PhysicalMemProp* prop, int option, std::size_t* granularity);
}

}  // namespace modelmem::device::acl

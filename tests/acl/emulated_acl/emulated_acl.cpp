// An emulated Ascend runtime for the tests: built as emulated_acl/libascendcl.so, it implements
// the ACL functions modelmem uses on host memory, with the documented constraints, so the NPU
// backend runs end to end on a machine without Ascend hardware. Test code, never installed.
//
// What it enforces (each violation returns the code a real runtime documents, or 100000):
//  - aclInit once (a second call returns 100002); everything else needs it first (100001);
//  - a device set on the calling thread (aclrtSetDevice) for memory calls (107002 otherwise);
//  - aclrtMalloc: the request aligned to 32 bytes plus 32 bytes of padding is charged;
//    aclrtMallocAlign32: aligned to 32, no padding; returned addresses are 32-byte aligned and
//    deliberately no more (an odd multiple of 32), so callers may rely on 32 only;
//  - physical memory and mappings in 2 MiB granules, one aclrtUnmapMem per aclrtMapMem, at the
//    address that was mapped; a mapped handle cannot be freed, a reservation with mappings
//    cannot be released;
//  - 207001 once the device capacity is used up (physical memory and plain allocations count).
//
// Environment (read by aclInit and by modelmem_emulated_acl_reset()):
//  MODELMEM_EMULATED_ACL_MEMORY_MB  capacity per device (default 1024)
//  MODELMEM_EMULATED_ACL_DEVICES    number of devices (default 1)
//  MODELMEM_EMULATED_ACL_VMM        present (default) | absent (the virtual-memory symbols are
//                                   not found by dlsym) | unsupported (they return 207000)
//  MODELMEM_EMULATED_ACL_HIDE       comma-separated optional symbols dlsym does not find
//                                   (aclrtMallocAlign32, aclrtMemGetAllocationGranularity, ...)
//  MODELMEM_EMULATED_ACL_FAIL       FUNCTION:N[:CODE],...: the N-th call (from 1) of FUNCTION
//                                   returns CODE (default 507899) once
// "Not found by dlsym" uses GNU indirect functions: their resolver returns null for a hidden
// symbol, which dlsym then returns, exactly as for a runtime that lacks the function.
//
// Test hooks (not ACL functions): modelmem_emulated_acl_reset, _fail, _calls, _state.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "device/acl/acl_api.hpp"

namespace acl = modelmem::device::acl;
using acl::Status;

namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Physical {
  int device = 0;
  std::size_t size = 0;
  std::uintptr_t mapped_at = 0;  // 0: not mapped
};

struct Reservation {
  std::size_t size = 0;
  std::uintptr_t raw = 0;  // what mmap returned (the base is aligned inside it)
  std::size_t raw_size = 0;
  std::map<std::uintptr_t, std::pair<std::size_t, Physical*>> mappings;  // va -> size, handle
};

struct Plain {
  int device = 0;
  std::size_t charged = 0;
  void* raw = nullptr;
};

struct Fail {
  std::string function;
  std::uint64_t nth = 0;
  Status code = acl::kDriverInternal;
};

enum class Vmm { kPresent, kAbsent, kUnsupported };

struct State {
  std::mutex mu;
  bool initialised = false;
  int devices = 1;
  std::size_t capacity = 1024 * kMiB;
  Vmm vmm = Vmm::kPresent;
  std::vector<std::size_t> used;
  std::map<std::uintptr_t, Plain> plain;
  std::set<Physical*> physical;
  std::map<std::uintptr_t, Reservation> reservations;
  std::set<std::uintptr_t> streams;
  std::set<std::uintptr_t> events;
  std::map<std::string, std::uint64_t> calls;
  std::vector<Fail> fails;
  std::string soc = "Ascend-emulated";
};

State& state() {
  static State* s = new State;  // never destroyed: callers may run at exit
  return *s;
}

thread_local int current_device = -1;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n == 0) {
    std::fprintf(stderr, "emulated ACL: %s=%s is not a positive whole number\n", name, v);
    std::abort();  // test misconfiguration
  }
  return static_cast<std::size_t>(n);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t p = s.find(sep, start);
    if (p == std::string::npos) p = s.size();
    if (p > start) out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
  return out;
}

Vmm vmm_from_env() {
  const char* v = std::getenv("MODELMEM_EMULATED_ACL_VMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "present") == 0) return Vmm::kPresent;
  if (std::strcmp(v, "absent") == 0) return Vmm::kAbsent;
  if (std::strcmp(v, "unsupported") == 0) return Vmm::kUnsupported;
  std::fprintf(stderr,
               "emulated ACL: MODELMEM_EMULATED_ACL_VMM=%s: expected present, absent "
               "or unsupported\n",
               v);
  std::abort();
}

std::vector<Fail> fails_from_env() {
  std::vector<Fail> out;
  const char* v = std::getenv("MODELMEM_EMULATED_ACL_FAIL");
  if (v == nullptr) return out;
  for (const std::string& item : split(v, ',')) {
    std::vector<std::string> f = split(item, ':');
    if (f.size() < 2 || f.size() > 3) {
      std::fprintf(stderr,
                   "emulated ACL: MODELMEM_EMULATED_ACL_FAIL: '%s' is not "
                   "FUNCTION:N[:CODE]\n",
                   item.c_str());
      std::abort();
    }
    out.push_back({f[0], std::strtoull(f[1].c_str(), nullptr, 10),
                   f.size() == 3 ? std::atoi(f[2].c_str()) : acl::kDriverInternal});
  }
  return out;
}

// Reads the environment into `s` (the lock held).
void configure(State& s) {
  s.capacity = env_size("MODELMEM_EMULATED_ACL_MEMORY_MB", 1024) * kMiB;
  s.devices = static_cast<int>(env_size("MODELMEM_EMULATED_ACL_DEVICES", 1));
  s.vmm = vmm_from_env();
  s.used.assign(static_cast<std::size_t>(s.devices), 0);
  s.fails = fails_from_env();
}

bool hidden(const char* symbol) {
  if (vmm_from_env() == Vmm::kAbsent) {
    for (const char* vmm :
         {"aclrtReserveMemAddress", "aclrtReleaseMemAddress", "aclrtMallocPhysical",
          "aclrtFreePhysical", "aclrtMapMem", "aclrtUnmapMem", "aclrtMemGetAllocationGranularity"})
      if (std::strcmp(symbol, vmm) == 0) return true;
  }
  const char* v = std::getenv("MODELMEM_EMULATED_ACL_HIDE");
  if (v == nullptr) return false;
  for (const std::string& name : split(v, ','))
    if (name == symbol) return true;
  return false;
}

// Counts the call and returns the injected code, or 0. The lock must be held.
Status enter(State& s, const char* function) {
  std::uint64_t n = ++s.calls[function];
  for (auto it = s.fails.begin(); it != s.fails.end(); ++it) {
    if (it->function == function && it->nth == n) {
      Status code = it->code;
      s.fails.erase(it);
      return code;
    }
  }
  return acl::kSuccess;
}

// Common prologue of calls that need aclInit and a current device.
Status device_call(State& s, const char* function) {
  if (Status r = enter(s, function)) return r;
  if (!s.initialised) return acl::kUninitialized;
  if (current_device < 0 || current_device >= s.devices) return acl::kNoContext;
  return acl::kSuccess;
}

std::size_t align_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

Status plain_malloc(const char* function, void** ptr, std::size_t size, int policy, bool padded) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, function)) return r;
  if (ptr == nullptr || size == 0 || policy < 0 || policy > acl::kLastPolicy)
    return acl::kInvalidParam;
  ++s.calls[std::string(function) + "/policy" + std::to_string(policy)];  // for the tests
  *ptr = nullptr;
  if (size > (SIZE_MAX >> 2)) return acl::kMemoryAllocation;
  const std::size_t charged = align_up(size, 32) + (padded ? 32 : 0);
  std::size_t& used = s.used[static_cast<std::size_t>(current_device)];
  if (charged > s.capacity - used) return acl::kMemoryAllocation;
  // 64-byte aligned storage, handed out 32 bytes in: aligned to 32 and never to 64.
  void* raw = std::aligned_alloc(64, align_up(charged + 32, 64));
  if (raw == nullptr) return acl::kMemoryAllocation;
  auto p = reinterpret_cast<std::uintptr_t>(raw) + 32;
  s.plain[p] = Plain{current_device, charged, raw};
  used += charged;
  *ptr = reinterpret_cast<void*>(p);
  return acl::kSuccess;
}

Status vmm_gate(State& s, const char* function) {
  if (Status r = device_call(s, function)) return r;
  if (s.vmm == Vmm::kUnsupported) return acl::kFeatureNotSupported;
  return acl::kSuccess;
}

bool granular(std::uintptr_t v) {
  return v % kGranule == 0;
}

}  // namespace

#define EMULATED_EXPORT extern "C" __attribute__((visibility("default")))

// ---- initialisation and devices ----

EMULATED_EXPORT Status aclInit(const char*) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclInit")) return r;
  if (s.initialised) return acl::kRepeatInitialize;
  configure(s);
  s.initialised = true;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclFinalize() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclFinalize")) return r;
  if (!s.initialised) return acl::kUninitialized;
  s.initialised = false;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtSetDevice(std::int32_t device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtSetDevice")) return r;
  if (!s.initialised) return acl::kUninitialized;
  if (device < 0 || device >= s.devices) return acl::kInvalidDevice;
  current_device = device;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtResetDevice(std::int32_t device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtResetDevice")) return r;
  if (!s.initialised) return acl::kUninitialized;
  if (device < 0 || device >= s.devices) return acl::kInvalidDevice;
  if (current_device == device) current_device = -1;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtGetDevice(std::int32_t* device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtGetDevice")) return r;
  if (!s.initialised) return acl::kUninitialized;
  if (device == nullptr) return acl::kInvalidParam;
  if (current_device < 0) return acl::kNoContext;
  *device = current_device;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtGetDeviceCount(std::uint32_t* count) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtGetDeviceCount")) return r;
  if (!s.initialised) return acl::kUninitialized;
  if (count == nullptr) return acl::kInvalidParam;
  *count = static_cast<std::uint32_t>(s.devices);
  return acl::kSuccess;
}

EMULATED_EXPORT const char* aclrtGetSocName() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (enter(s, "aclrtGetSocName") != acl::kSuccess || !s.initialised) return nullptr;
  return s.soc.c_str();
}

// ---- plain memory ----

EMULATED_EXPORT Status aclrtMalloc(void** ptr, std::size_t size, int policy) {
  return plain_malloc("aclrtMalloc", ptr, size, policy, true);
}

extern "C" Status emulated_malloc_align32(void** ptr, std::size_t size, int policy) {
  return plain_malloc("aclrtMallocAlign32", ptr, size, policy, false);
}

EMULATED_EXPORT Status aclrtFree(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtFree")) return r;
  auto it = s.plain.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == s.plain.end()) return acl::kMemoryFree;
  s.used[static_cast<std::size_t>(it->second.device)] -= it->second.charged;
  std::free(it->second.raw);
  s.plain.erase(it);
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtGetMemInfo(int attr, std::size_t* free_bytes,
                                       std::size_t* total_bytes) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtGetMemInfo")) return r;
  if (free_bytes == nullptr || total_bytes == nullptr || attr < 0 || attr > 5)
    return acl::kInvalidParam;
  *total_bytes = s.capacity;
  *free_bytes = s.capacity - s.used[static_cast<std::size_t>(current_device)];
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtMemset(void* ptr, std::size_t max, std::int32_t value,
                                   std::size_t count) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtMemset")) return r;
  if (ptr == nullptr || count > max) return acl::kInvalidParam;
  std::memset(ptr, value, count);
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtMemcpy(void* dst, std::size_t max, const void* src, std::size_t count,
                                   int kind) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtMemcpy")) return r;
  if (dst == nullptr || src == nullptr || count > max || kind < acl::kHostToHost ||
      kind > acl::kDeviceToDevice)
    return acl::kInvalidParam;
  std::memmove(dst, src, count);
  return acl::kSuccess;
}

// ---- streams and events (host memory is synchronous: they only have to exist) ----

EMULATED_EXPORT Status aclrtCreateStream(void** stream) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtCreateStream")) return r;
  if (stream == nullptr) return acl::kInvalidParam;
  auto* token = new char;
  s.streams.insert(reinterpret_cast<std::uintptr_t>(token));
  *stream = token;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtDestroyStream(void* stream) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtDestroyStream")) return r;
  if (s.streams.erase(reinterpret_cast<std::uintptr_t>(stream)) == 0) return acl::kInvalidParam;
  delete static_cast<char*>(stream);
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtSynchronizeStream(void* stream) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtSynchronizeStream")) return r;
  if (stream != nullptr && s.streams.count(reinterpret_cast<std::uintptr_t>(stream)) == 0)
    return acl::kInvalidParam;
  return acl::kSuccess;
}

extern "C" Status emulated_synchronize_device() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return device_call(s, "aclrtSynchronizeDevice");
}

EMULATED_EXPORT Status aclrtCreateEvent(void** event) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtCreateEvent")) return r;
  if (event == nullptr) return acl::kInvalidParam;
  auto* token = new char;
  s.events.insert(reinterpret_cast<std::uintptr_t>(token));
  *event = token;
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtDestroyEvent(void* event) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = enter(s, "aclrtDestroyEvent")) return r;
  if (s.events.erase(reinterpret_cast<std::uintptr_t>(event)) == 0) return acl::kInvalidParam;
  delete static_cast<char*>(event);
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtRecordEvent(void* event, void*) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtRecordEvent")) return r;
  return s.events.count(reinterpret_cast<std::uintptr_t>(event)) ? acl::kSuccess
                                                                 : acl::kInvalidParam;
}

EMULATED_EXPORT Status aclrtQueryEventStatus(void* event, int* status) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtQueryEventStatus")) return r;
  if (status == nullptr || s.events.count(reinterpret_cast<std::uintptr_t>(event)) == 0)
    return acl::kInvalidParam;
  *status = 0;  // complete
  return acl::kSuccess;
}

EMULATED_EXPORT Status aclrtSynchronizeEvent(void* event) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = device_call(s, "aclrtSynchronizeEvent")) return r;
  return s.events.count(reinterpret_cast<std::uintptr_t>(event)) ? acl::kSuccess
                                                                 : acl::kInvalidParam;
}

// ---- virtual memory (the implementations; exported below through resolvers) ----

extern "C" Status emulated_reserve(void** va, std::size_t size, std::size_t alignment, void*,
                                   std::uint64_t) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtReserveMemAddress")) return r;
  if (va == nullptr || size == 0 || (alignment != 0 && alignment % kGranule != 0))
    return acl::kInvalidParam;
  const std::size_t bytes = align_up(size, kGranule);
  const std::size_t raw_size = bytes + kGranule;
  void* raw =
      mmap(nullptr, raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return acl::kMemoryAllocation;
  const std::uintptr_t base = align_up(reinterpret_cast<std::uintptr_t>(raw), kGranule);
  s.reservations[base] = Reservation{bytes, reinterpret_cast<std::uintptr_t>(raw), raw_size, {}};
  *va = reinterpret_cast<void*>(base);
  return acl::kSuccess;
}

extern "C" Status emulated_release(void* va) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtReleaseMemAddress")) return r;
  auto it = s.reservations.find(reinterpret_cast<std::uintptr_t>(va));
  if (it == s.reservations.end() || !it->second.mappings.empty()) return acl::kInvalidParam;
  munmap(reinterpret_cast<void*>(it->second.raw), it->second.raw_size);
  s.reservations.erase(it);
  return acl::kSuccess;
}

extern "C" Status emulated_malloc_physical(void** handle, std::size_t size,
                                           const acl::PhysicalMemProp* prop, std::uint64_t flags) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtMallocPhysical")) return r;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kGranule != 0 ||
      prop->location.type != acl::kLocationDevice || prop->mem_attr != acl::kHbmMemHuge ||
      prop->location.id >= static_cast<std::uint32_t>(s.devices))
    return acl::kInvalidParam;
  std::size_t& used = s.used[prop->location.id];
  if (size > s.capacity - used) return acl::kMemoryAllocation;
  auto* p = new Physical{static_cast<int>(prop->location.id), size, 0};
  s.physical.insert(p);
  used += size;
  *handle = p;
  return acl::kSuccess;
}

extern "C" Status emulated_free_physical(void* handle) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtFreePhysical")) return r;
  auto* p = static_cast<Physical*>(handle);
  if (s.physical.count(p) == 0 || p->mapped_at != 0) return acl::kInvalidParam;
  s.used[static_cast<std::size_t>(p->device)] -= p->size;
  s.physical.erase(p);
  delete p;
  return acl::kSuccess;
}

extern "C" Status emulated_map(void* va, std::size_t size, std::size_t offset, void* handle,
                               std::uint64_t flags) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtMapMem")) return r;
  auto* p = static_cast<Physical*>(handle);
  const auto addr = reinterpret_cast<std::uintptr_t>(va);
  if (s.physical.count(p) == 0 || p->mapped_at != 0 || offset != 0 || flags != 0 || size == 0 ||
      size > p->size || !granular(addr) || !granular(size))
    return acl::kInvalidParam;
  // Inside one reservation, overlapping no mapping.
  auto r = s.reservations.upper_bound(addr);
  if (r == s.reservations.begin()) return acl::kInvalidParam;
  --r;
  Reservation& res = r->second;
  if (addr + size > r->first + res.size) return acl::kInvalidParam;
  auto next = res.mappings.lower_bound(addr);
  if (next != res.mappings.end() && next->first < addr + size) return acl::kInvalidParam;
  if (next != res.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.first > addr) return acl::kInvalidParam;
  }
  if (mmap(va, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
      MAP_FAILED)
    return acl::kDriverInternal;
  res.mappings[addr] = {size, p};
  p->mapped_at = addr;
  return acl::kSuccess;
}

extern "C" Status emulated_unmap(void* va) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtUnmapMem")) return r;
  const auto addr = reinterpret_cast<std::uintptr_t>(va);
  auto r = s.reservations.upper_bound(addr);
  if (r == s.reservations.begin()) return acl::kInvalidParam;
  --r;
  auto m = r->second.mappings.find(addr);  // the address of an earlier map call, exactly
  if (m == r->second.mappings.end()) return acl::kInvalidParam;
  mmap(va, m->second.first, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
       0);
  m->second.second->mapped_at = 0;
  r->second.mappings.erase(m);
  return acl::kSuccess;
}

extern "C" Status emulated_granularity(acl::PhysicalMemProp* prop, int option,
                                       std::size_t* granularity) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Status r = vmm_gate(s, "aclrtMemGetAllocationGranularity")) return r;
  if (prop == nullptr || granularity == nullptr ||
      (option != acl::kGranularityMinimum && option != acl::kGranularityRecommended))
    return acl::kInvalidParam;
  *granularity = kGranule;
  return acl::kSuccess;
}

// ---- the optional symbols, found by dlsym unless hidden ----

#define EMULATED_OPTIONAL(symbol, impl, type) \
  extern "C" type* resolve_##symbol() {       \
    return hidden(#symbol) ? nullptr : &impl; \
  }                                           \
  EMULATED_EXPORT type symbol __attribute__((ifunc("resolve_" #symbol)));

using MallocT = Status(void**, std::size_t, int);
using SyncT = Status();
using ReserveT = Status(void**, std::size_t, std::size_t, void*, std::uint64_t);
using ReleaseT = Status(void*);
using PhysicalT = Status(void**, std::size_t, const acl::PhysicalMemProp*, std::uint64_t);
using MapT = Status(void*, std::size_t, std::size_t, void*, std::uint64_t);
using GranularityT = Status(acl::PhysicalMemProp*, int, std::size_t*);

EMULATED_OPTIONAL(aclrtMallocAlign32, emulated_malloc_align32, MallocT)
EMULATED_OPTIONAL(aclrtSynchronizeDevice, emulated_synchronize_device, SyncT)
EMULATED_OPTIONAL(aclrtReserveMemAddress, emulated_reserve, ReserveT)
EMULATED_OPTIONAL(aclrtReleaseMemAddress, emulated_release, ReleaseT)
EMULATED_OPTIONAL(aclrtMallocPhysical, emulated_malloc_physical, PhysicalT)
EMULATED_OPTIONAL(aclrtFreePhysical, emulated_free_physical, ReleaseT)
EMULATED_OPTIONAL(aclrtMapMem, emulated_map, MapT)
EMULATED_OPTIONAL(aclrtUnmapMem, emulated_unmap, ReleaseT)
EMULATED_OPTIONAL(aclrtMemGetAllocationGranularity, emulated_granularity, GranularityT)

// ---- test hooks ----

/// What the emulation holds now, for leak checks.
struct EmulatedAclState {
  std::uint64_t plain_allocations;
  std::uint64_t physical_handles;
  std::uint64_t mappings;
  std::uint64_t reservations;
  std::uint64_t used_bytes;  // on every device together
  std::uint64_t pending_failures;
};

/// Clears everything (memory still held is dropped) and reads the environment again, as if the
/// process had just started: aclInit must be called again.
EMULATED_EXPORT void modelmem_emulated_acl_reset() {
  State& s = state();
  std::lock_guard lock(s.mu);
  for (auto& [p, plain] : s.plain) std::free(plain.raw);
  s.plain.clear();
  for (auto& [base, r] : s.reservations) munmap(reinterpret_cast<void*>(r.raw), r.raw_size);
  s.reservations.clear();
  for (Physical* p : s.physical) delete p;
  s.physical.clear();
  s.calls.clear();
  s.initialised = false;
  configure(s);
  current_device = -1;
}

/// Makes the `nth` call (from 1, counted from now on) of `function` return `code` once.
EMULATED_EXPORT void modelmem_emulated_acl_fail(const char* function, std::uint64_t nth,
                                                Status code) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.fails.push_back({function, s.calls[function] + nth, code});
}

/// Calls of `function` so far (all functions together for null). "aclrtMalloc/policyN" counts
/// the plain allocations asked for with policy N.
EMULATED_EXPORT std::uint64_t modelmem_emulated_acl_calls(const char* function) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (function != nullptr) return s.calls[function];
  std::uint64_t n = 0;
  for (auto& [name, count] : s.calls)
    if (name.find('/') == std::string::npos) n += count;
  return n;
}

/// Names of the functions called so far, comma-separated (valid until the next call).
EMULATED_EXPORT const char* modelmem_emulated_acl_called() {
  static std::string names;
  State& s = state();
  std::lock_guard lock(s.mu);
  names.clear();
  for (auto& [name, count] : s.calls)
    if (count > 0 && name.find('/') == std::string::npos)
      names += (names.empty() ? "" : ",") + name;
  return names.c_str();
}

EMULATED_EXPORT void modelmem_emulated_acl_state(EmulatedAclState* out) {
  State& s = state();
  std::lock_guard lock(s.mu);
  std::uint64_t mappings = 0;
  for (auto& [base, r] : s.reservations) mappings += r.mappings.size();
  std::uint64_t used = 0;
  for (std::size_t u : s.used) used += u;
  *out = EmulatedAclState{s.plain.size(), s.physical.size(), mappings, s.reservations.size(),
                          used,           s.fails.size()};
}

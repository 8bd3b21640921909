// libmodelmem_cuda_alloc.so: modelmem's strategies behind PyTorch's CUDAPluggableAllocator.
//
//   alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "modelmem_alloc", "modelmem_free")
//   torch.cuda.memory.change_current_allocator(alloc)
//
// One allocator stack per device, built at the device's first allocation from
// MODELMEM_ALLOC_CONF (the config keys of modelmem; device:limited wraps the GPU), and published
// to `modelmem info` as pool MODELMEM_POOL_NAME (default "pytorch"). The stacks are never
// destroyed: at interpreter exit CUDA may already be shutting down, and the driver reclaims
// everything anyway.
#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/device_slots.hpp"
#include "modelmem/config/publish.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/cuda.hpp"

#define MODELMEM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace modelmem;

// The per-device stacks (config/device_slots.hpp, shared with the NPU library).
config::DeviceSlots& slots() {
  static auto* table =
      new config::DeviceSlots({// never destroyed, see above
                               "cuda", "pytorch",
                               [](int) {
                                 const char* env = std::getenv("MODELMEM_ALLOC_CONF");
                                 return config::DeviceSlots::Configured{
                                     config::parse_config(env != nullptr ? env : ""),
                                     env != nullptr ? "MODELMEM_ALLOC_CONF" : "defaults"};
                               },
                               [](int device) { return device::make_cuda_device(device); }});
  return *table;
}

// Why the calling thread's last failed pool selection, free or listener call failed.
thread_local std::string last_error;

}  // namespace

/// PyTorch's alloc function. Failures are thrown as std::runtime_error (PyTorch turns them into
/// a Python RuntimeError carrying the message, with the numbers of the out-of-memory report).
MODELMEM_EXPORT void* modelmem_alloc(ssize_t size, int device, cudaStream_t stream) {
  if (size <= 0) return nullptr;
  try {
    return slots().get(device).allocate(static_cast<std::size_t>(size),
                                        reinterpret_cast<alloc::Stream>(stream));
  } catch (const OutOfMemory& e) {
    throw std::runtime_error(std::string("CUDA out of memory (modelmem): ") + e.what());
  } catch (const Error& e) {
    throw std::runtime_error(std::string("modelmem: ") + e.what());
  }
}

/// PyTorch's free function. Never throws (it runs inside destructors): a failed free (a double
/// free, a pointer modelmem did not hand out, a device without an allocator) is reported on
/// stderr and replaces the thread's modelmem_cuda_last_error().
MODELMEM_EXPORT void modelmem_free(void* ptr, size_t /*size*/, int device,
                                   cudaStream_t /*stream*/) {
  if (ptr == nullptr) return;
  try {
    slots().get(device).deallocate(ptr);
  } catch (const std::exception& e) {
    char where[32];
    std::snprintf(where, sizeof where, "cuda:%d", device);
    config::report_failed_free(last_error, ptr, where, e.what());
  }
}

/// Statistics for scripts (PyTorch's memory_stats() is empty under a pluggable allocator):
/// fills up to n of [reserved, allocated, peak reserved, peak allocated, device allocations,
/// OOMs] and returns how many it filled, or -1 when the device has no allocator yet (a query
/// never builds one).
MODELMEM_EXPORT int modelmem_cuda_stats(int device, unsigned long long* out, int n) {
  return slots().stats(device, out, n);
}

/// Every peak of the device's stack becomes its current value (torch.cuda.reset_peak_memory_stats);
/// nothing for a device without a stack yet.
MODELMEM_EXPORT void modelmem_cuda_reset_peak(int device) {
  if (alloc::Allocator* a = slots().built(device)) a->reset_peak();
}

/// Returns cached memory to the device (what torch.cuda.empty_cache() does natively); nothing
/// for a device without a stack yet.
MODELMEM_EXPORT void modelmem_cuda_trim(int device) {
  try {
    if (alloc::Allocator* a = slots().built(device)) a->trim();
  } catch (const std::exception&) {
  }
}

/// The allocator's one-line description; "" when it could not be built. Valid until the next
/// call from the same thread.
MODELMEM_EXPORT const char* modelmem_cuda_describe(int device) {
  thread_local std::string text;
  try {
    text = slots().get(device).describe();
  } catch (const std::exception& e) {
    text = std::string("error: ") + e.what();
  }
  return text.c_str();
}

// ---- per-model pools in one process (pools:[NAME:MiB,...] in MODELMEM_ALLOC_CONF) ----

namespace {

// The stack the thread's selection applies to: the current GPU's (every GPU's stack is built
// from the same string, so the selection, kept per thread, routes on each of them).
alloc::Allocator* selection_stack() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  try {
    return &slots().get(device);
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

}  // namespace

/// Selects pool `name` for the calling thread's later allocations on every GPU (nested; each
/// push is ended by one pop). 0 when selected; 1 when MODELMEM_ALLOC_CONF has no pools (nothing
/// to route); -1 when `name` is not one of them (modelmem_cuda_last_error() says why).
MODELMEM_EXPORT int modelmem_cuda_pool_push(const char* name) {
  alloc::Allocator* a = selection_stack();
  return a == nullptr ? -1 : config::push_pool(*a, name, last_error);
}

/// Ends the calling thread's innermost selection: 0; 1 without pools; -1 when none was selected.
MODELMEM_EXPORT int modelmem_cuda_pool_pop() {
  alloc::Allocator* a = selection_stack();
  return a == nullptr ? -1 : config::pop_pool(*a, last_error);
}

// ---- listening to allocations (MemoryLogger) ----

/// Registers `fn` to be called with every event of every GPU's stack, with the device, the pool
/// and the stream (config/listener_abi.h): its id (>= 0), or -1 (modelmem_cuda_last_error()).
MODELMEM_EXPORT int modelmem_cuda_add_listener(modelmem_event_fn fn, void* user) {
  return slots().listeners().add(fn, user, last_error);
}

/// Ends registration `id`; when it returns 0, the function is not running and is never called
/// again. -1 for an id not registered, or a call from inside a listener.
MODELMEM_EXPORT int modelmem_cuda_remove_listener(int id) {
  return slots().listeners().remove(id, last_error);
}

/// Why the calling thread's last failed pool selection, free or listener call failed ("" when
/// none did).
MODELMEM_EXPORT const char* modelmem_cuda_last_error() {
  return last_error.c_str();
}

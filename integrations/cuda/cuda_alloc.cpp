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
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/config/listeners.hpp"
#include "modelmem/config/publish.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/cuda.hpp"
#include "modelmem/monitor/publisher.hpp"

#define MODELMEM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace modelmem;

constexpr int kMaxDevices = 64;

struct Slot {
  std::once_flag once;
  std::shared_ptr<alloc::Allocator> allocator;
  std::string error;
  std::string describe;
  std::vector<monitor::PoolRegistration> registrations;
  std::unique_ptr<config::EventRelay> relay;  // to the listeners (modelmem_cuda_add_listener)
};

Slot* slots() {
  static Slot* s = new Slot[kMaxDevices];  // never destroyed, see above
  return s;
}

// Why the calling thread's last failed pool selection, free or listener call failed.
thread_local std::string last_error;

config::ListenerRegistry& listeners() {
  static auto* r = new config::ListenerRegistry;  // never destroyed, see above
  return *r;
}

void build_slot(Slot& s, int index) {
  try {
    const char* env = std::getenv("MODELMEM_ALLOC_CONF");
    config::Config config = config::parse_config(env != nullptr ? env : "");
    config::Built b = config::build(config, device::make_cuda_device(index));
    s.allocator = b.allocator;
    s.describe = b.allocator->describe();
    const std::string name = "cuda:" + std::to_string(index);
    s.registrations = config::publish_stack(config, b, "pytorch", name);
    s.relay = config::relay_stack(listeners(), config, b, "pytorch", index, name);
    if (const char* v = std::getenv("MODELMEM_VERBOSE"); v != nullptr && *v == '1') {
      std::fprintf(stderr, "modelmem: cuda:%d: %s\n", index, s.describe.c_str());
    }
  } catch (const std::exception& e) {
    s.error = e.what();
    std::fprintf(stderr, "modelmem: cannot build the allocator for cuda:%d: %s\n", index, e.what());
  }
}

alloc::Allocator& allocator_for(int device) {
  if (device < 0 || device >= kMaxDevices) {
    throw std::runtime_error("modelmem: device index " + std::to_string(device) + " out of range");
  }
  Slot& s = slots()[device];
  std::call_once(s.once, [&] { build_slot(s, device); });
  if (!s.allocator) throw std::runtime_error("modelmem: " + s.error);
  return *s.allocator;
}

}  // namespace

/// PyTorch's alloc function. Failures are thrown as std::runtime_error (PyTorch turns them into
/// a Python RuntimeError carrying the message, with the numbers of the out-of-memory report).
MODELMEM_EXPORT void* modelmem_alloc(ssize_t size, int device, cudaStream_t stream) {
  if (size <= 0) return nullptr;
  alloc::Allocator& a = allocator_for(device);
  try {
    return a.allocate(static_cast<std::size_t>(size), reinterpret_cast<alloc::Stream>(stream));
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
    allocator_for(device).deallocate(ptr);
  } catch (const std::exception& e) {
    char where[32];
    std::snprintf(where, sizeof where, "cuda:%d", device);
    config::report_failed_free(last_error, ptr, where, e.what());
  }
}

/// Statistics for scripts (PyTorch's memory_stats() is empty under a pluggable allocator):
/// fills up to n of [reserved, allocated, peak reserved, peak allocated, device allocations,
/// OOMs] and returns how many it filled, or -1 when the device has no allocator yet.
MODELMEM_EXPORT int modelmem_cuda_stats(int device, unsigned long long* out, int n) {
  if (device < 0 || device >= kMaxDevices || out == nullptr) return -1;
  try {
    alloc::Allocator& a = allocator_for(device);
    alloc::Stats st = a.stats();
    const long long values[] = {st.reserved_bytes.all.current, st.allocated_bytes.all.current,
                                st.reserved_bytes.all.peak,    st.allocated_bytes.all.peak,
                                st.num_device_alloc,           st.num_ooms};
    int k = 0;
    for (; k < n && k < static_cast<int>(std::size(values)); ++k) {
      out[k] = static_cast<unsigned long long>(values[k] < 0 ? 0 : values[k]);
    }
    return k;
  } catch (const std::exception&) {
    return -1;
  }
}

MODELMEM_EXPORT void modelmem_cuda_reset_peak(int device) {
  try {
    allocator_for(device).reset_peak();
  } catch (const std::exception&) {
  }
}

/// Returns cached memory to the device (what torch.cuda.empty_cache() does natively).
MODELMEM_EXPORT void modelmem_cuda_trim(int device) {
  try {
    allocator_for(device).trim();
  } catch (const std::exception&) {
  }
}

/// The allocator's one-line description; "" when it could not be built. Valid until the next
/// call from the same thread.
MODELMEM_EXPORT const char* modelmem_cuda_describe(int device) {
  thread_local std::string text;
  try {
    text = allocator_for(device).describe();
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
    return &allocator_for(device);
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
  return listeners().add(fn, user, last_error);
}

/// Ends registration `id`; when it returns 0, the function is not running and is never called
/// again. -1 for an id not registered, or a call from inside a listener.
MODELMEM_EXPORT int modelmem_cuda_remove_listener(int id) {
  return listeners().remove(id, last_error);
}

/// Why the calling thread's last failed pool selection, free or listener call failed ("" when
/// none did).
MODELMEM_EXPORT const char* modelmem_cuda_last_error() {
  return last_error.c_str();
}

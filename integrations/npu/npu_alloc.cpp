// libmodelmem_npu_alloc.so: modelmem's strategies behind torch_npu's NPUPluggableAllocator and
// MindSpore's PluggableAllocator on Ascend NPUs.
//
//   torch_npu: NPUPluggableAllocator(path, "modelmem_npu_alloc", "modelmem_npu_free"), with the
//              optional hooks modelmem_npu_init / modelmem_npu_reset /
//              modelmem_npu_memory_fraction;
//   MindSpore: PluggableAllocator(path, "modelmem_ms_alloc", "modelmem_ms_free").
//
// One allocator stack per device, built at the device's first allocation from the config
// string (MODELMEM_ALLOC_CONF, else torch_npu's PYTORCH_NPU_ALLOC_CONF / PYTORCH_ALLOC_CONF
// translated, see config/torch_npu.hpp) on the ACL device "npu:N", and published to `modelmem info`
// as pool MODELMEM_POOL_NAME (default "npu"). A failed allocation returns NULL (the framework
// raises its own out-of-memory error; modelmem_npu_last_error() says why); nothing here aborts or
// lets an exception out. The stacks are never destroyed: at interpreter exit the runtime may
// already be finalised, and the driver reclaims everything anyway.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "modelmem/config/config.hpp"
#include "modelmem/config/device_slots.hpp"
#include "modelmem/config/publish.hpp"
#include "modelmem/config/torch_npu.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/strings.hpp"
#include "modelmem/device/acl.hpp"

#define MODELMEM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace modelmem;

constexpr int kMaxDevices = config::DeviceSlots::kMaxDevices;

// set_memory_fraction before a device's first allocation; 0 = none.
std::atomic<double>* fractions() {
  static auto* f = new std::atomic<double>[kMaxDevices]();  // never destroyed, see above
  return f;
}

thread_local std::string last_error;

bool verbose() {
  const char* v = std::getenv("MODELMEM_VERBOSE");
  return v != nullptr && *v == '1';
}

// The environment's configuration. Its notes (torch_npu keys mapped to modelmem's nearest
// behaviour) are printed once per process, by whichever call reads it first.
config::EnvironmentConf read_environment() {
  config::EnvironmentConf conf = config::environment_conf();
  static std::once_flag printed;
  std::call_once(printed, [&] {
    for (const std::string& note : conf.notes) std::fprintf(stderr, "modelmem: %s\n", note.c_str());
  });
  return conf;
}

// The per-device stacks (config/device_slots.hpp, shared with the CUDA library).
config::DeviceSlots& slots() {
  static auto* table = new config::DeviceSlots(
      {// never destroyed, see above
       "npu", "npu",
       [](int device) {
         const config::EnvironmentConf conf = read_environment();
         config::Config config = config::parse_config(conf.text);
         if (double f = fractions()[device].load(); f > 0.0)
           config.values["per_process_memory_fraction"] = core::format_double(f);
         return config::DeviceSlots::Configured{std::move(config),
                                                conf.variable.empty() ? "defaults" : conf.variable};
       },
       [](int device) { return device::make_acl_device(device); }});
  return *table;
}

// The stack of `device`, built on first use; null with last_error set when there is none.
alloc::Allocator* allocator_for(int device) {
  try {
    return &slots().get(device);
  } catch (const std::exception& e) {
    last_error = e.what();
    return nullptr;
  }
}

// The stack of `device` when it was built already (hooks must not build one).
alloc::Allocator* built(int device) {
  return slots().built(device);
}

// The advice an out-of-memory error ends with: what to change so the request fits.
std::string what_to_change(const OomInfo& info) {
  if (info.quota)
    return "to change: raise the pool's quota in pools:[...] (modelmem plan MODEL --device-memory "
           "SIZE gives each model's need), or give this model a smaller batch";
  if (info.reserved > info.allocated && info.reserved - info.allocated >= info.requested)
    return "to change: the free memory is cached in pieces; torch.npu.empty_cache() "
           "(modelmem_npu_trim) returns it, and expandable_segments:True avoids it where the "
           "device has virtual memory";
  return "to change: the device is full; a smaller batch or fewer models on this NPU (modelmem "
         "plan MODEL --device-memory SIZE shows what fits), or a static pool sized from the plan";
}

void* allocate_on(int device, std::size_t size, void* stream) {
  if (size == 0) {
    last_error = "allocation of 0 bytes";
    return nullptr;
  }
  alloc::Allocator* a = allocator_for(device);
  if (a == nullptr) {
    // The first failure printed why the stack cannot be built; every later NULL says so too
    // (torch_npu does not check the pointer, so a silent NULL surfaces far from its cause).
    static auto* said = new std::atomic<bool>[kMaxDevices]();  // per device; never destroyed
    const bool built_now = device >= 0 && device < kMaxDevices && !said[device].exchange(true) &&
                           last_error.rfind("no allocator for", 0) == 0;
    if (!built_now) std::fprintf(stderr, "modelmem: %s\n", last_error.c_str());
    return nullptr;
  }
  try {
    return a->allocate(size, reinterpret_cast<alloc::Stream>(stream));
  } catch (const OutOfMemory& e) {
    last_error = std::string("NPU out of memory: ") + e.what();
    // A pool's refusal already says which quota serves the request.
    if (last_error.find("; to change: ") == std::string::npos)
      last_error += "; " + what_to_change(e.info());
    if (verbose()) std::fprintf(stderr, "modelmem: %s\n", last_error.c_str());
    return nullptr;
  } catch (const std::exception& e) {
    last_error = e.what();
    if (verbose()) std::fprintf(stderr, "modelmem: %s\n", last_error.c_str());
    return nullptr;
  }
}

}  // namespace

// ---- torch_npu: NPUPluggableAllocator ----

/// The alloc function: `size` bytes on NPU `device` for use on `stream` (an aclrtStream).
/// NULL when it cannot be had; modelmem_npu_last_error() says why.
MODELMEM_EXPORT void* modelmem_npu_alloc(size_t size, int device, void* stream) {
  return allocate_on(device, size, stream);
}

/// The free function; size, device and stream are those of the allocation. Never fails
/// loudly (it runs inside destructors): a pointer that is not modelmem's is reported on stderr
/// and in modelmem_npu_last_error().
MODELMEM_EXPORT void modelmem_npu_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) {
  if (ptr == nullptr) return;
  alloc::Allocator* a = built(device);
  try {
    if (a == nullptr) throw InvalidInput("no allocator was built for this device");
    a->deallocate(ptr);
  } catch (const std::exception& e) {
    char where[32];
    std::snprintf(where, sizeof where, "npu:%d", device);
    config::report_failed_free(last_error, ptr, where, e.what());
  }
}

/// set_init_fn: called with the number of devices when torch_npu initialises the allocator.
/// Checks the runtime early (a problem is reported once, on stderr) and prints the notes of
/// torch_npu keys mapped to modelmem's behaviour; a configuration that cannot build is reported
/// by the first allocation, as torch_npu reports it. Stacks are built at each device's first
/// allocation.
MODELMEM_EXPORT void modelmem_npu_init(int device_count) {
  try {
    try {
      config::parse_config(read_environment().text);
    } catch (const InvalidInput&) {
      // A configuration torch_npu would refuse fails where torch_npu fails: at the first
      // allocation, which says why (once here too would say it twice).
    }
    device::AclAvailability a = device::acl_availability();
    if (!a.available)
      std::fprintf(stderr, "modelmem: %s\n", a.reason.c_str());
    else if (device_count > a.device_count)
      std::fprintf(stderr, "modelmem: the framework expects %d NPUs, the runtime has %d\n",
                   device_count, a.device_count);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "modelmem: %s\n", e.what());
  }
}

/// set_reset_fn (torch.npu.empty_cache()): returns every device's cached memory to the device.
MODELMEM_EXPORT void modelmem_npu_reset(bool /*check_error*/) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (alloc::Allocator* a = built(d)) {
      try {
        a->trim();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "modelmem: empty_cache on npu:%d: %s\n", d, e.what());
      }
    }
  }
}

/// set_memory_fraction_fn (torch.npu.set_per_process_memory_fraction): caps the device's stack
/// at `fraction` of its HBM. Applies to a stack built afterwards, i.e. when called before the
/// device's first allocation; later it is refused with a message (the stack is already sized).
MODELMEM_EXPORT void modelmem_npu_memory_fraction(double fraction, int device) {
  if (!(fraction > 0.0 && fraction <= 1.0) || device < 0 || device >= kMaxDevices) {
    std::fprintf(stderr, "modelmem: set_memory_fraction(%g, %d): fraction must be in (0, 1]\n",
                 fraction, device);
    return;
  }
  if (built(device) != nullptr) {
    std::fprintf(stderr,
                 "modelmem: set_memory_fraction(%g) on npu:%d after its first allocation is not "
                 "applied; call it before, or set per_process_memory_fraction in "
                 "MODELMEM_ALLOC_CONF\n",
                 fraction, device);
    return;
  }
  fractions()[device].store(fraction);
}

// ---- MindSpore: PluggableAllocator (no device argument: the thread's current device) ----

MODELMEM_EXPORT void* modelmem_ms_alloc(size_t size, void* stream) {
  const int device = device::acl_current_device();
  if (device < 0) {
    last_error = "no NPU is current on this thread (aclrtSetDevice was not called)";
    return nullptr;
  }
  return allocate_on(device, size, stream);
}

MODELMEM_EXPORT void modelmem_ms_free(void* ptr, size_t /*size*/, void* /*stream*/) {
  if (ptr == nullptr) return;
  // The current device's stack first; a block freed on another thread may be another device's.
  const int current = device::acl_current_device();
  std::string why = "no allocator holds it";
  for (int i = -1; i < kMaxDevices; ++i) {
    const int d = i < 0 ? current : i;
    if (d < 0 || (i >= 0 && d == current)) continue;
    alloc::Allocator* a = built(d);
    if (a == nullptr) continue;
    try {
      a->deallocate(ptr);
      return;
    } catch (const InvalidInput& e) {
      why = e.what();  // not this device's block: try the next
    } catch (const std::exception& e) {
      why = e.what();
      break;
    }
  }
  config::report_failed_free(last_error, ptr, nullptr, why.c_str());
}

// ---- per-model pools in one process (pools:[NAME:MiB,...] in the configuration) ----

namespace {

// The stack the thread's pool selection applies to: the current device's (every device's stack
// is built from the same string, so the selection, kept per thread, routes on each of them).
alloc::Allocator* selection_stack() {
  const int current = device::acl_current_device();
  return allocator_for(current < 0 ? 0 : current);
}

}  // namespace

/// Selects pool `name` for the calling thread's later allocations on every NPU (nested; each
/// push is ended by one pop). 0 when selected; 1 when the configuration has no pools (nothing to
/// route); -1 when `name` is not one of them or the stack cannot be built
/// (modelmem_npu_last_error() says why).
MODELMEM_EXPORT int modelmem_npu_pool_push(const char* name) {
  alloc::Allocator* a = selection_stack();
  if (a == nullptr) return -1;
  return config::push_pool(*a, name, last_error);
}

/// Ends the calling thread's innermost pool selection: 0; 1 without pools; -1 when none was
/// selected.
MODELMEM_EXPORT int modelmem_npu_pool_pop() {
  alloc::Allocator* a = selection_stack();
  if (a == nullptr) return -1;
  return config::pop_pool(*a, last_error);
}

// ---- listening to allocations (MemoryLogger) ----

/// Registers `fn` to be called with every event of every NPU's stack (alloc, free, segments,
/// OOMs, step marks), with the device, the pool and the stream (config/listener_abi.h). Returns
/// its id (>= 0), or -1 (modelmem_npu_last_error() says why: no function, or 4 registered).
MODELMEM_EXPORT int modelmem_npu_add_listener(modelmem_event_fn fn, void* user) {
  return slots().listeners().add(fn, user, last_error);
}

/// Ends registration `id`; when it returns 0, the function is not running and is never called
/// again. -1 for an id not registered, or a call from inside a listener.
MODELMEM_EXPORT int modelmem_npu_remove_listener(int id) {
  return slots().listeners().remove(id, last_error);
}

// ---- step marks, statistics, maintenance ----

/// Marks the start and end of one step (an inference or a training iteration) on a device, for
/// strategy:planned with planned_steps:marked; other strategies pass them to listeners only.
MODELMEM_EXPORT void modelmem_npu_begin_step(int device) {
  if (alloc::Allocator* a = allocator_for(device)) a->begin_step();
}
MODELMEM_EXPORT void modelmem_npu_end_step(int device) {
  if (alloc::Allocator* a = allocator_for(device)) a->end_step();
}

/// Fills up to n of [reserved, allocated, peak reserved, peak allocated, device allocations,
/// OOMs] and returns how many it filled, or -1 when the device has no allocator.
MODELMEM_EXPORT int modelmem_npu_stats(int device, unsigned long long* out, int n) {
  return slots().stats(device, out, n);
}

MODELMEM_EXPORT void modelmem_npu_reset_peak(int device) {
  if (alloc::Allocator* a = built(device)) a->reset_peak();
}

/// Returns one device's cached memory to it.
MODELMEM_EXPORT void modelmem_npu_trim(int device) {
  if (alloc::Allocator* a = built(device)) {
    try {
      a->trim();
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
}

/// The stack's one-line description, or "error: ..." when it cannot be built. Valid until the
/// next call from the same thread.
MODELMEM_EXPORT const char* modelmem_npu_describe(int device) {
  thread_local std::string text;
  alloc::Allocator* a = allocator_for(device);
  text = a != nullptr ? a->describe() : "error: " + last_error;
  return text.c_str();
}

/// The fallback warning of the device's stack (e.g. expandable segments unsupported), "" if none.
MODELMEM_EXPORT const char* modelmem_npu_warning(int device) {
  thread_local std::string text;
  text.clear();
  if (alloc::Allocator* a = built(device)) {
    alloc::Stats st = a->stats();
    if (!st.warnings.empty()) text = st.warnings.front();
  }
  return text.c_str();
}

/// Why the calling thread's last failed call failed ("" when none did).
MODELMEM_EXPORT const char* modelmem_npu_last_error() {
  return last_error.c_str();
}

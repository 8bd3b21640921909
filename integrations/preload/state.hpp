// The shared state of libmodelmem_preload.so: whether the library serves requests, the
// strategy it serves them with, the lock that serialises calls into it, and the per-thread depth
// that sends modelmem's own requests to the next allocator. Defined in init.cpp, written only
// by initialise() (before the library turns ready) and read by every other file.
//
// How pointers find their way home: every modelmem segment lies inside one address range
// reserved at start-up (RegionDevice), so free/realloc/malloc_usable_size route by one
// comparison (ours()). Everything made while the library is not ready (before its constructor
// ran, during its own initialisation, inside modelmem itself on the same thread) comes from the
// next allocator, so recursion is impossible: modelmem's own containers use it.
//
// Concurrency: one mutex serialises calls into the strategy (which is thread-safe anyway); the
// same mutex is held across fork() (pthread_atfork) so a child never inherits it locked.
//
// The files of the library, one job each:
//   c_abi.cpp           the C allocation functions (malloc, free, ..., malloc_usable_size)
//   next_allocator.*    finding the allocator after this one in the lookup order (dlsym)
//   bootstrap.*         the static buffer that serves requests made during that lookup
//   cache_glue.*        the small-block cache (small_cache.hpp) in front of the C library
//   strategy.*          calls into the modelmem strategy for large requests; fork handlers
//   init.cpp            initialisation: the one place that reads the configuration and builds
//   report.cpp          the exit report (MODELMEM_REPORT=1)
//   trace_file.*        each process's trace file (MODELMEM_TRACE), flushed at exit and signals
//   publish.cpp         the pools in `modelmem info`/`top`; C symbols for step marks and pools
//   stack.*             what a configuration builds (shared with `modelmem run`'s preflight)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/trace/recorder.hpp"
#include "region_device.hpp"
#include "stack.hpp"

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

enum State : int { kNotReady = 0, kInitialising = 1, kReady = 2, kOff = 3 };

/// Larger alignments (valloc, pvalloc, page-aligned memalign) go to the next allocator.
constexpr std::size_t kMaxAlignment = 256;

extern std::atomic<int> g_state;
/// Requests of at least this many bytes go to modelmem.
extern std::size_t g_threshold;
/// Where every modelmem segment lies.
extern RegionDevice* g_region;
/// Serialises every call into the strategy (held across fork()).
extern std::mutex g_mutex;
/// The strategy (nullptr until the library is ready).
extern alloc::Allocator* g_alloc;
/// The strategy has pools (g_alloc->pools() names them).
extern bool g_has_pools;
/// The strategy (or the router's main stack) is the planned arena (Stats::planned).
extern bool g_planned;
/// What was built, kept for the process's lifetime (nullptr until the library is ready).
extern Stack* g_stack;
/// MODELMEM_TRACE: the recorder and the path it streams to (trace_file.hpp).
extern trace::Recorder* g_recorder;
extern std::string* g_trace_path;
/// The strategy's describe(), for the report.
extern std::string* g_describe;
/// Requests counted for the report (under g_mutex).
extern std::uint64_t g_served;
/// Large requests the strategy refused (out of memory), served by the next allocator instead.
extern std::atomic<std::uint64_t> g_large_libc;

/// Depth of modelmem code on this thread: > 0 means "we are inside modelmem, use the C heap".
/// initial-exec: reading it must not allocate (a dynamic TLS block would call malloc).
extern __thread int t_depth __attribute__((tls_model("initial-exec")));

struct Inside {
  Inside() { ++t_depth; }
  ~Inside() { --t_depth; }
};

/// Whether this request may go to the strategy (the library is ready, not inside modelmem).
inline bool ready() noexcept {
  return t_depth == 0 && g_state.load(std::memory_order_acquire) == kReady;
}

/// Whether the library serves requests (the C symbols are no-ops otherwise).
inline bool serving() noexcept {
  return g_state.load(std::memory_order_acquire) == kReady;
}

/// Whether `p` was made by modelmem (lies in the region).
inline bool ours(const void* p) noexcept {
  return g_region != nullptr && g_region->contains(p);
}

/// Builds the strategy from MODELMEM_ALLOC_CONF once (init.cpp); later calls return at once.
void initialise() noexcept;

/// Publishes the stack's pools to the monitor (`modelmem info`, `top`). Call once, ready, after
/// the library's own pthread_atfork handlers are registered (the publisher's run first then).
void publish_pools();

/// A request refused because it would take a pool over its quota: the one-line message on
/// stderr (the first 10 per process; the rest are counted).
void report_quota(const char* what) noexcept;

/// A request of `size` bytes that the calling thread's pool (or the main stack) could not serve
/// (it is full: out of memory below its quota), about to go to the next allocator: counted per
/// pool (the report, and `modelmem info` as the pool's fallback warnings), and told once per
/// process on stderr, naming the pool, its size and the request. Called under g_mutex.
void report_passed_on(std::size_t size) noexcept;
/// The report's line on requests passed on, per pool ("" when there were none).
std::string passed_on_summary();

}  // namespace modelmem::preload

#pragma GCC visibility pop

// libmodelmem_preload.so: LD_PRELOAD it into any process to serve large heap requests from a
// modelmem strategy (MODELMEM_ALLOC_CONF, e.g. strategy:planned) and everything else from the
// next allocator in the lookup order: the C library, or an allocator preloaded after this one
// (LD_PRELOAD="libmodelmem_preload.so libmimalloc.so.2" gives small requests to mimalloc).
//
// The next allocator's functions are looked up (dlsym RTLD_NEXT) on the first call of any of
// ours, before anything is handed out, so every small block is made and freed by the same
// allocator. The few requests made while that lookup itself runs come from a static bootstrap
// buffer whose blocks are never reused. When the next allocator is the C library, freed small
// blocks are kept per thread and handed out again (small_cache.hpp): glibc's own per-thread
// cache is small and skips aligned requests. They stay the C library's blocks throughout.
//
// How pointers find their way home: every modelmem segment lies inside one address range
// reserved at start-up (RegionDevice), so free/realloc/malloc_usable_size route by one
// comparison. Everything made while the library is not ready (before its constructor ran,
// during its own initialisation, inside modelmem itself on the same thread) comes from the C
// library (the next allocator), so recursion is impossible: modelmem's own containers use it.
//
// Concurrency: one mutex serialises calls into the strategy (which is thread-safe anyway); the
// same mutex is held across fork() (pthread_atfork) so a child never inherits it locked.
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "modelmem/alloc/planned_allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/factory.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"
#include "modelmem/trace/recorder.hpp"
#include "region_device.hpp"
#include "small_cache.hpp"
#include "stack.hpp"
#include "state.hpp"

namespace modelmem::preload {

std::mutex g_mutex;
alloc::Allocator* g_alloc = nullptr;
alloc::PoolRouter* g_router = nullptr;
Stack* g_stack = nullptr;
__thread int t_depth __attribute__((tls_model("initial-exec"))) = 0;

namespace {

enum State : int { kNotReady = 0, kInitialising = 1, kReady = 2, kOff = 3 };

// Larger alignments (valloc, pvalloc, page-aligned memalign) go to the next allocator.
constexpr std::size_t kMaxAlignment = 256;

std::atomic<int> g_state{kNotReady};
std::size_t g_threshold = 64u << 10;
RegionDevice* g_region = nullptr;
alloc::PlannedAllocator* g_planned = nullptr;  // g_alloc when the strategy is planned
trace::Recorder* g_recorder = nullptr;
std::string* g_trace_path = nullptr;
std::string* g_describe = nullptr;
bool g_report = false;
// Requested size of every live block made by modelmem (malloc_usable_size, realloc), whatever
// the strategy. Its nodes come from the C heap (it is only touched inside modelmem).
std::unordered_map<const void*, std::size_t>* g_sizes = nullptr;

// Requests counted for the report (under g_mutex, except the refused ones: relaxed atomics).
std::uint64_t g_served = 0;
// Large requests the strategy refused (out of memory), served by the next allocator instead.
std::atomic<std::uint64_t> g_large_libc{0};

// Set by mm_allocate when it refused a request for a pool's quota: the caller must not give it
// to the next allocator (the quota would mean nothing then).
__thread bool t_quota_refused __attribute__((tls_model("initial-exec"))) = false;

// ---- the next allocator

struct NextAllocator {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*memalign)(size_t, size_t);
  size_t (*usable)(void*);
};

NextAllocator g_next{};
std::atomic<bool> g_next_ready{false};
pthread_once_t g_next_once = PTHREAD_ONCE_INIT;
// Set while this thread looks the next allocator up: its requests go to the bootstrap buffer.
__thread bool t_resolving __attribute__((tls_model("initial-exec"))) = false;

template <typename Fn>
Fn lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

void resolve_next() {
  t_resolving = true;
  NextAllocator n{};
  n.malloc = lookup<decltype(n.malloc)>("malloc");
  n.free = lookup<decltype(n.free)>("free");
  n.calloc = lookup<decltype(n.calloc)>("calloc");
  n.realloc = lookup<decltype(n.realloc)>("realloc");
  n.memalign = lookup<decltype(n.memalign)>("memalign");
  n.usable = lookup<decltype(n.usable)>("malloc_usable_size");
  t_resolving = false;
  if (!n.malloc || !n.free || !n.calloc || !n.realloc || !n.memalign || !n.usable) {
    // Cannot happen with a C library below us; nothing sensible is left to do.
    static const char msg[] =
        "modelmem preload: no malloc/free/calloc/realloc/memalign/"
        "malloc_usable_size after this library in the lookup order\n";
    (void)!write(2, msg, sizeof msg - 1);
    std::abort();
  }
  g_next = n;
  g_next_ready.store(true, std::memory_order_release);
}

// Requests made while the next allocator is being looked up (dlsym's own bookkeeping): bumped
// out of a static buffer, never reused, freed as no-ops. Each block starts after a 16-byte
// header holding its size.
constexpr std::size_t kBootstrapBytes = 64u << 10;
alignas(64) unsigned char g_bootstrap[kBootstrapBytes];
std::atomic<std::size_t> g_bootstrap_used{0};

bool in_bootstrap(const void* p) noexcept {
  auto* b = static_cast<const unsigned char*>(p);
  return b >= g_bootstrap && b < g_bootstrap + kBootstrapBytes;
}

void* bootstrap_alloc(std::size_t size, std::size_t alignment = 16) noexcept {
  if (alignment < 16) alignment = 16;
  std::size_t used = g_bootstrap_used.load(std::memory_order_relaxed);
  for (;;) {
    std::size_t start = (used + 16 + alignment - 1) / alignment * alignment;
    if (start > kBootstrapBytes || size > kBootstrapBytes - start) {
      errno = ENOMEM;
      return nullptr;
    }
    if (g_bootstrap_used.compare_exchange_weak(used, start + size, std::memory_order_relaxed)) {
      std::memcpy(g_bootstrap + start - sizeof(std::size_t), &size, sizeof size);
      return g_bootstrap + start;
    }
  }
}

std::size_t bootstrap_size(const void* p) noexcept {
  std::size_t size;
  std::memcpy(&size, static_cast<const unsigned char*>(p) - sizeof size, sizeof size);
  return size;
}

// ---- the small-block cache (small_cache.hpp), in front of the C library only: an allocator
// preloaded after modelmem has thread caches of its own.

std::atomic<bool> g_cache_on{false};
bool g_cache_pending = false;  // planned: the cache starts with the first plan (under g_mutex)
CacheLimits g_cache_limits;
std::uintptr_t g_cache_key = 0;      // marks blocks in a cache (double-free check)
pthread_key_t g_cache_exit;          // its destructor drains an exiting thread's cache
std::string* g_cache_off = nullptr;  // why the cache is off, for the report
__thread ThreadCache t_cache __attribute__((tls_model("initial-exec")));
// Counters of threads whose caches flushed them (exited, or every 64 Ki requests).
std::atomic<std::uint64_t> g_cache_hits{0}, g_cache_misses{0}, g_cache_passed{0};

void flush_cache_counters(ThreadCache& c) noexcept {
  g_cache_hits.fetch_add(c.hits, std::memory_order_relaxed);
  g_cache_misses.fetch_add(c.misses, std::memory_order_relaxed);
  g_cache_passed.fetch_add(c.passed, std::memory_order_relaxed);
  c.hits = c.misses = c.passed = 0;
}

// The next allocator, or nullptr while this thread is looking it up (use the bootstrap buffer).
inline const NextAllocator* next() noexcept {
  if (__builtin_expect(g_next_ready.load(std::memory_order_acquire), 1)) return &g_next;
  if (t_resolving) return nullptr;
  pthread_once(&g_next_once, resolve_next);
  return &g_next;
}

void* next_malloc(std::size_t size) noexcept {
  const NextAllocator* n = next();
  return n ? n->malloc(size) : bootstrap_alloc(size);
}

void* next_memalign(std::size_t alignment, std::size_t size) noexcept {
  const NextAllocator* n = next();
  return n ? n->memalign(alignment, size) : bootstrap_alloc(size, alignment);
}

void* next_calloc(std::size_t count, std::size_t size) noexcept {
  const NextAllocator* n = next();
  if (n) return n->calloc(count, size);
  std::size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return bootstrap_alloc(total);  // static memory, never reused: still zero
}

// A name for the report: the file the next malloc lives in.
std::string next_name() {
  Dl_info info{};
  if (g_next_ready.load(std::memory_order_acquire) &&
      dladdr(reinterpret_cast<void*>(g_next.malloc), &info) != 0 && info.dli_fname != nullptr)
    return info.dli_fname;
  return "?";
}

bool ready() noexcept {
  return t_depth == 0 && g_state.load(std::memory_order_acquire) == kReady;
}

// Whether this request may use the small-block cache (set once before the library is ready).
inline bool cache_ready() noexcept {
  return t_depth == 0 && g_cache_on.load(std::memory_order_acquire);
}

// Whether a request of `size` bytes is served through the small-block cache.
inline bool cached_request(std::size_t size) noexcept {
  return size < g_threshold && size <= kCacheMax && cache_ready();
}

// A small block from this thread's cache, or from the next allocator for the whole class size
// (so that it returns to the same class). `alignment` <= kCacheAlign.
__attribute__((always_inline)) inline void* cache_allocate(std::size_t size,
                                                           std::size_t alignment) noexcept {
  const int c = class_ceil(size);
  const bool aligned = alignment > 16;
  if (void* p = t_cache.take(c, aligned)) {
    if (__builtin_expect(t_cache.hits >= (1u << 16), 0)) flush_cache_counters(t_cache);
    return p;
  }
  return aligned ? g_next.memalign(kCacheAlign, class_size(c)) : g_next.malloc(class_size(c));
}

void cache_thread_exit(void*) {
  t_cache.state = 2;  // frees made by later thread-exit code go to the next allocator
  t_cache.drain([](void* p) { g_next.free(p); });
  flush_cache_counters(t_cache);
}

// Keeps a freed small block of the next allocator; false: free it there.
__attribute__((always_inline)) inline bool cache_free(void* p) noexcept {
  switch (t_cache.put(p, g_next.usable(p), g_cache_key, g_cache_limits,
                      [](void* q) { g_next.free(q); })) {
    case ThreadCache::Put::kept:
      if (__builtin_expect(t_cache.state == 0, 0)) {
        Inside inside;  // setspecific may allocate its second-level table
        // Without the thread-exit hook the blocks would be lost when the thread ends: keep no
        // more than this one then.
        t_cache.state = pthread_setspecific(g_cache_exit, &t_cache) == 0 ? 1 : 2;
      }
      return true;
    case ThreadCache::Put::full:
      return false;
    case ThreadCache::Put::double_free:
      break;
  }
  // As glibc does: the heap can no longer be trusted.
  std::fprintf(stderr, "modelmem preload: free(%p): double free (the block is already free)\n", p);
  std::abort();
}

bool ours(const void* p) noexcept {
  return g_region != nullptr && g_region->contains(p);
}

void* mm_allocate(std::size_t size) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    void* p = g_alloc->allocate(size);
    try {
      g_sizes->emplace(p, size);
    } catch (...) {
      g_alloc->deallocate(p);
      throw;
    }
    g_served++;
    if (g_cache_pending && g_planned->planned_stats().plans_made > 0) {
      g_cache_pending = false;
      g_cache_on.store(true, std::memory_order_release);
    }
    return p;
  } catch (const QuotaExceeded& e) {
    t_quota_refused = true;
    report_quota(e.what());
    return nullptr;  // the caller returns NULL with ENOMEM
  } catch (...) {
    return nullptr;  // counted in g_large_libc by the caller, which falls back
  }
}

// After mm_allocate returned nullptr: true (errno ENOMEM) when a quota refused the request.
inline bool quota_refused() noexcept {
  if (!t_quota_refused) return false;
  t_quota_refused = false;
  errno = ENOMEM;
  return true;
}

void mm_free(void* p) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    g_alloc->deallocate(p);
    g_sizes->erase(p);
  } catch (const std::exception& e) {
    // As glibc does for a double free: the heap can no longer be trusted.
    std::fprintf(stderr, "modelmem preload: free(%p): %s\n", p, e.what());
    std::abort();
  }
}

std::size_t mm_size(const void* p) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  auto it = g_sizes->find(p);
  return it == g_sizes->end() ? 0 : it->second;
}

// Requests served by modelmem; the sizes of the others are left to the next allocator.
void* large_malloc(std::size_t size) noexcept {
  void* p = mm_allocate(size);
  if (p == nullptr) {
    if (quota_refused()) return nullptr;
    g_large_libc.fetch_add(1, std::memory_order_relaxed);
    p = next_malloc(size);
  }
  return p;
}

void fork_prepare() {
  g_mutex.lock();
}
void fork_parent() {
  g_mutex.unlock();
}
void fork_child() {
  g_mutex.unlock();
}

void print_report() {
  Inside inside;
  std::lock_guard lock(g_mutex);
  std::FILE* out = stderr;
  std::fprintf(out, "modelmem preload report (pid %d)\n", static_cast<int>(getpid()));
  std::fprintf(out, "  strategy          %s\n", g_describe ? g_describe->c_str() : "?");
  std::fprintf(out, "  threshold         %s\n", format_bytes(g_threshold).c_str());
  std::fprintf(out, "  small requests    %s\n", next_name().c_str());
  if (g_cache_on.load(std::memory_order_acquire)) {
    ThreadCache& mine = t_cache;  // this thread's counters not flushed yet
    const std::uint64_t hits = g_cache_hits.load() + mine.hits;
    const std::uint64_t misses = g_cache_misses.load() + mine.misses;
    const std::uint64_t passed = g_cache_passed.load() + mine.passed;
    std::fprintf(out,
                 "  small cache       %s per thread: %llu hits (%.1f%%), %llu misses, %llu frees "
                 "passed on (cache full)\n",
                 format_bytes(g_cache_limits.budget).c_str(), static_cast<unsigned long long>(hits),
                 hits + misses == 0
                     ? 0.0
                     : 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses),
                 static_cast<unsigned long long>(misses), static_cast<unsigned long long>(passed));
  } else if (g_cache_pending) {
    std::fprintf(out, "  small cache       %s per thread from the first plan: no plan yet\n",
                 format_bytes(g_cache_limits.budget).c_str());
  } else {
    std::fprintf(out, "  small cache       %s\n", g_cache_off ? g_cache_off->c_str() : "off");
  }
  std::fprintf(out, "  large requests    %llu by modelmem, %llu by the next allocator (refused)\n",
               static_cast<unsigned long long>(g_served),
               static_cast<unsigned long long>(g_large_libc.load()));
  alloc::Stats s = g_alloc->stats();
  if (g_planned != nullptr) {
    auto p = g_planned->planned_stats();
    std::fprintf(out, "  steps             %llu (period %llu requests)\n",
                 static_cast<unsigned long long>(p.steps),
                 static_cast<unsigned long long>(p.period));
    std::fprintf(out, "  steps planned     %llu plans made, %llu kept, %llu re-plans\n",
                 static_cast<unsigned long long>(p.plans_made),
                 static_cast<unsigned long long>(p.plans_kept),
                 static_cast<unsigned long long>(p.replans));
    std::fprintf(out, "  hits              %llu (%s)\n", static_cast<unsigned long long>(p.hits),
                 format_bytes(p.hit_bytes).c_str());
    std::fprintf(out,
                 "  misses            %llu (%llu slot still occupied), %llu in mismatching "
                 "steps; %llu outside plans by design\n",
                 static_cast<unsigned long long>(p.misses),
                 static_cast<unsigned long long>(p.occupied),
                 static_cast<unsigned long long>(p.mismatched_steps),
                 static_cast<unsigned long long>(p.unplanned));
    std::fprintf(out, "  peak live         %s\n", format_bytes(p.peak_live).c_str());
    std::fprintf(out, "  arena size        %s (%llu arena allocations)\n",
                 format_bytes(p.arena_size).c_str(),
                 static_cast<unsigned long long>(p.arena_allocations));
    if (p.arena_size > 0) {
      const auto [base, bytes] = g_planned->arena_range();
      if (p.arena_huge_pages)
        std::fprintf(out,
                     "  arena pages       %s of it in 2 MiB pages (transparent huge pages: %s)\n",
                     format_bytes(device::huge_page_bytes(base, bytes)).c_str(),
                     device::transparent_huge_pages_mode().c_str());
      else
        std::fprintf(out, "  arena pages       4 KiB pages (%s)\n",
                     !g_planned->options().huge_pages ? "planned_huge_pages:False"
                     : bytes < (2u << 20)             ? "the arena is smaller than one 2 MiB page"
                                          : "the kernel refused transparent huge pages");
    }
    std::fprintf(out, "  faults avoided    %llu pages (hits served from the pre-faulted arena)\n",
                 static_cast<unsigned long long>(p.hit_bytes / 4096));
  } else {
    std::fprintf(out, "  peak live         %s\n",
                 format_bytes(static_cast<std::size_t>(s.requested_bytes.all.peak)).c_str());
  }
  std::fprintf(out, "  reserved          %s now, %s peak\n",
               format_bytes(static_cast<std::size_t>(s.reserved_bytes.all.current)).c_str(),
               format_bytes(static_cast<std::size_t>(s.reserved_bytes.all.peak)).c_str());
  std::fprintf(out, "  OS calls          %llu (segments mapped and unmapped by modelmem)\n",
               static_cast<unsigned long long>(g_region->os_calls()));
}

void write_trace() {
  Inside inside;
  std::lock_guard lock(g_mutex);
  if (!g_recorder->write_csv(g_trace_path->c_str()))
    std::fprintf(stderr, "modelmem preload: cannot write trace %s: %s\n", g_trace_path->c_str(),
                 std::strerror(errno));
  if (g_recorder->dropped() > 0)
    std::fprintf(stderr, "modelmem preload: trace %s lost %llu events (ring buffer full)\n",
                 g_trace_path->c_str(), static_cast<unsigned long long>(g_recorder->dropped()));
}

// Turns the small-block cache on, with `budget` bytes per thread, where the next allocator is
// the C library.
void start_cache(std::size_t budget) {
  const NextAllocator* n = next();
  if (budget == 0) {
    g_cache_off = new std::string("off (preload_cache_kb:0)");
    return;
  }
  // The C library's own malloc (an allocator preloaded after modelmem may also define
  // __libc_malloc, so only a lookup in libc itself tells).
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* libc_malloc = libc != nullptr ? dlsym(libc, "malloc") : nullptr;
  if (libc != nullptr) dlclose(libc);
  if (libc_malloc == nullptr || reinterpret_cast<void*>(n->malloc) != libc_malloc) {
    g_cache_off = new std::string("off (the next allocator keeps its own per-thread caches)");
    return;
  }
  if (pthread_key_create(&g_cache_exit, cache_thread_exit) != 0) {
    g_cache_off = new std::string("off (no thread-specific key left for its thread-exit hook)");
    return;
  }
  g_cache_limits = cache_limits(budget);
  // A random key: a live block holds it only if the program wrote these very 64 bits there.
  std::uintptr_t key = 0;
  if (getrandom(&key, sizeof key, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof key)) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    key = (static_cast<std::uintptr_t>(t.tv_nsec) << 20) ^ static_cast<std::uintptr_t>(t.tv_sec) ^
          reinterpret_cast<std::uintptr_t>(&t) ^
          static_cast<std::uintptr_t>(getpid()) * 0x9E3779B97F4A7C15ull;
  }
  g_cache_key = key | 1u;
  // The planned arena turns it on with its first plan, when the program repeats itself: during
  // start-up the blocks it kept would scatter the C library's heap among the long-lived
  // objects a model builds (5 MiB more peak RSS for ResNet-50).
  if (g_planned == nullptr)
    g_cache_on.store(true, std::memory_order_release);
  else
    g_cache_pending = true;
}

// MODELMEM_STRICT=1: a library that cannot serve requests stops the program instead.
bool strict() {
  const char* v = std::getenv("MODELMEM_STRICT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void initialise() noexcept {
  int expected = kNotReady;
  if (!g_state.compare_exchange_strong(expected, kInitialising)) return;
  Inside inside;
  try {
    const char* conf = std::getenv("MODELMEM_ALLOC_CONF");
    const char* trace = std::getenv("MODELMEM_TRACE");
    auto* stack = new Stack(build_stack(conf ? conf : "", trace ? trace : "", false));
    if (stack->off) {  // strategy:system
      delete stack;
      g_state.store(kOff, std::memory_order_release);
      return;
    }
    g_stack = stack;  // kept for the process's lifetime: exit handlers may free its memory
    g_threshold = stack->threshold;
    g_region = stack->region.get();
    // The C library now sees small requests only: keep its heap top instead of trimming it
    // at 128 KiB (its default), or a steady loop would shrink and regrow it (brk calls and page
    // faults) over and over.
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    g_alloc = stack->built.allocator.get();
    g_router = dynamic_cast<alloc::PoolRouter*>(g_alloc);
    g_planned = dynamic_cast<alloc::PlannedAllocator*>(
        g_router && g_router->main() ? g_router->main().get() : g_alloc);
    g_describe = new std::string(g_alloc->describe());
    g_sizes = new std::unordered_map<const void*, std::size_t>();
    g_sizes->reserve(4096);
    if (trace != nullptr && *trace != '\0') {
      g_trace_path = new std::string(trace);
      g_recorder = new trace::Recorder(std::size_t{1} << 22);
      g_alloc->set_listener(g_recorder);
      std::atexit(write_trace);
    }
    if (const char* r = std::getenv("MODELMEM_REPORT"); r != nullptr && std::strcmp(r, "1") == 0) {
      g_report = true;
      std::atexit(print_report);
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    start_cache(stack->cache_bytes);
    g_state.store(kReady, std::memory_order_release);
    publish_pools();  // after pthread_atfork above: the publisher's fork handlers run first
  } catch (const std::exception& e) {
    if (strict()) {
      std::fprintf(stderr, "modelmem preload: cannot serve requests (MODELMEM_STRICT=1): %s\n",
                   e.what());
      _exit(2);
    }
    std::fprintf(stderr,
                 "modelmem preload: disabled, every request goes to the next allocator: %s\n",
                 e.what());
    g_state.store(kOff, std::memory_order_release);
  }
}

__attribute__((constructor)) void preload_constructor() {
  initialise();
}

bool valid_alignment(std::size_t a) noexcept {
  return a != 0 && (a & (a - 1)) == 0;
}

void* aligned(std::size_t alignment, std::size_t size) noexcept {
  if (alignment <= kCacheAlign && cached_request(size)) return cache_allocate(size, alignment);
  if (size >= g_threshold && alignment <= kMaxAlignment && ready()) return large_malloc(size);
  return next_memalign(alignment, size);
}

}  // namespace

bool serving() noexcept {
  return g_state.load(std::memory_order_acquire) == kReady;
}

}  // namespace modelmem::preload

using namespace modelmem::preload;

extern "C" {

/// For tests: 1 once the library serves requests, 0 before, 3 when it is off.
__attribute__((visibility("default"))) int modelmem_preload_state() {
  return g_state.load(std::memory_order_acquire);
}
/// For tests: whether `p` was made by modelmem.
__attribute__((visibility("default"))) int modelmem_preload_owns(const void* p) {
  return ours(p) ? 1 : 0;
}

__attribute__((visibility("default"))) void* malloc(size_t size) {
  if (cached_request(size)) return cache_allocate(size, 16);
  if (size >= g_threshold && ready()) return large_malloc(size);
  return next_malloc(size);
}

__attribute__((visibility("default"))) void free(void* ptr) {
  if (ptr == nullptr) return;
  if (ours(ptr)) {
    mm_free(ptr);
    return;
  }
  if (in_bootstrap(ptr)) return;
  if (cache_ready() && cache_free(ptr)) return;
  // Null only while this thread looks the next allocator up, before it made any block: a
  // pointer from elsewhere (the loader's start-up heap) is left alone.
  if (const NextAllocator* n = next()) n->free(ptr);
}

__attribute__((visibility("default"))) void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (total >= g_threshold && ready()) {
    void* p = mm_allocate(total);
    if (p != nullptr) {
      std::memset(p, 0, total);  // arena memory is reused: not zero
      return p;
    }
    if (quota_refused()) return nullptr;
    g_large_libc.fetch_add(1, std::memory_order_relaxed);
  } else if (cached_request(total)) {
    void* p = cache_allocate(total, 16);
    if (p != nullptr) std::memset(p, 0, total);  // a cached block is not zero
    return p;
  }
  return next_calloc(n, size);
}

__attribute__((visibility("default"))) void* realloc(void* ptr, size_t size) {
  if (ptr == nullptr) return malloc(size);
  if (size == 0) {  // glibc: frees and returns NULL
    free(ptr);
    return nullptr;
  }
  if (ours(ptr)) {
    const std::size_t old = mm_size(ptr);
    if (size <= old && size >= old / 2 && size >= g_threshold) return ptr;
    void* q = malloc(size);
    if (q == nullptr) return nullptr;  // the old block stays valid, as realloc promises
    std::memcpy(q, ptr, old < size ? old : size);
    mm_free(ptr);
    return q;
  }
  if (in_bootstrap(ptr)) {  // moved out; the bootstrap block itself is never reused
    const std::size_t old = bootstrap_size(ptr);
    void* q = malloc(size);
    if (q != nullptr) std::memcpy(q, ptr, old < size ? old : size);
    return q;
  }
  const NextAllocator* n = next();
  if (n == nullptr) {  // see free()
    errno = ENOMEM;
    return nullptr;
  }
  if (size < g_threshold || !ready()) return n->realloc(ptr, size);
  void* q = mm_allocate(size);
  if (q == nullptr) {
    if (quota_refused()) return nullptr;  // the old block stays valid
    g_large_libc.fetch_add(1, std::memory_order_relaxed);
    return n->realloc(ptr, size);
  }
  std::size_t old = n->usable(ptr);
  std::memcpy(q, ptr, old < size ? old : size);
  n->free(ptr);
  return q;
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  if (!valid_alignment(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  void* p = aligned(alignment, size);
  if (p == nullptr && size != 0) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  if (!valid_alignment(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned(alignment, size);
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  if (!valid_alignment(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return aligned(alignment, size);
}

__attribute__((visibility("default"))) void* valloc(size_t size) {
  return next_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded = rounded / page * page;
  return next_memalign(page, rounded == 0 ? page : rounded);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* ptr) {
  if (ptr == nullptr) return 0;
  if (ours(ptr)) return mm_size(ptr);
  if (in_bootstrap(ptr)) return bootstrap_size(ptr);
  const NextAllocator* n = next();
  return n ? n->usable(ptr) : 0;
}

}  // extern "C"

// The small-block cache (small_cache.hpp) glued into the C functions, in front of the C library
// only: an allocator preloaded after modelmem has thread caches of its own. The hot functions
// are inline here for c_abi.cpp; start_cache (called by initialise) and the thread-exit hook
// are in cache_glue.cpp.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "next_allocator.hpp"
#include "small_cache.hpp"
#include "state.hpp"

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

extern std::atomic<bool> g_cache_on;
// Planned: the cache waits for the program to settle, started by the first plan or by
// cache_settle_check (both under g_mutex); malloc's path reads it without the lock.
extern std::atomic<bool> g_cache_waiting;
extern std::string* g_cache_started;  // what started a waiting cache, for the report
extern CacheLimits g_cache_limits;
extern std::uintptr_t g_cache_key;  // marks blocks in a cache (double-free check)
extern pthread_key_t g_cache_exit;  // its destructor drains an exiting thread's cache
extern std::string* g_cache_off;    // why the cache is off, for the report
extern __thread ThreadCache t_cache __attribute__((tls_model("initial-exec")));  // init.cpp
// Counters of threads whose caches flushed them (exited, or every 64 Ki requests).
extern std::atomic<std::uint64_t> g_cache_hits, g_cache_misses, g_cache_passed;

void flush_cache_counters(ThreadCache& c) noexcept;

/// Small requests a thread makes between two looks at whether the program has settled.
inline constexpr std::uint32_t kSettleWindow = 1u << 16;
extern __thread std::uint32_t t_settle_count __attribute__((tls_model("initial-exec")));

/// Starts the waiting cache if the program has settled: neither the C library's heap nor the
/// peak of the strategy's live bytes grew over the last two windows of small requests (a
/// program whose steps make no large request never gets a plan). Takes g_mutex (strategy.cpp).
void cache_settle_check() noexcept;

/// Counts a small request while the cache waits (malloc's path to the next allocator).
__attribute__((always_inline)) inline void count_waiting_request() noexcept {
  if (__builtin_expect(g_cache_waiting.load(std::memory_order_relaxed), 0) &&
      ++t_settle_count >= kSettleWindow) {
    t_settle_count = 0;
    cache_settle_check();
  }
}

/// Turns the small-block cache on, with `budget` bytes per thread, where the next allocator is
/// the C library (initialise() calls it once).
void start_cache(std::size_t budget);

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

}  // namespace modelmem::preload

#pragma GCC visibility pop

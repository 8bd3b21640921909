// Calls into the modelmem strategy (see strategy.hpp).
#include "strategy.hpp"

#include <malloc.h>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "cache_glue.hpp"
#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "next_allocator.hpp"
#include "region_device.hpp"
#include "state.hpp"
#include "trace_file.hpp"

namespace modelmem::preload {
namespace {

// Whether the planned arena (the strategy, or the router's main stack) has made a plan.
bool first_plan_made() {
  const alloc::Allocator* main = g_has_pools ? g_alloc->upstream() : g_alloc;
  const std::optional<alloc::PlannedStats> p = main->stats().planned;
  return p && p->plans_made > 0;
}

// Turns the waiting small-block cache on (under g_mutex); `why` goes to the report.
void start_waiting_cache(const char* why) {
  g_cache_waiting.store(false, std::memory_order_relaxed);
  g_cache_started = new std::string(why);
  g_cache_on.store(true, std::memory_order_release);
}

}  // namespace

void* mm_allocate(std::size_t size) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    void* p = g_alloc->allocate(size);
    g_served++;
    if (g_cache_waiting.load(std::memory_order_relaxed) && first_plan_made())
      start_waiting_cache("from the first plan");
    return p;
  } catch (const QuotaExceeded& e) {
    t_quota_refused = true;
    report_quota(e.what());
    return nullptr;  // the caller returns NULL with ENOMEM
  } catch (...) {
    report_passed_on(size);
    return nullptr;  // counted in g_large_libc by the caller, which falls back
  }
}

void cache_settle_check() noexcept {
  if (t_depth != 0 || !ready()) return;  // not from inside modelmem (g_mutex may be held)
  Inside inside;
  std::lock_guard lock(g_mutex);
  if (!g_cache_waiting.load(std::memory_order_relaxed)) return;
  // What the last look saw, and how many looks in a row saw it unchanged.
  static std::int64_t peak = -1;
  static std::size_t heap = 0;
  static int quiet = 0;
  try {
    const std::int64_t p = g_alloc->stats().allocated_bytes.all.peak;
    const std::size_t h = mallinfo2().arena;  // the C library's heaps, every arena
    if (p != peak || h != heap) {
      peak = p;
      heap = h;
      quiet = 0;
    } else if (++quiet >= 2) {
      start_waiting_cache("from when the program settled (no plan yet)");
    }
  } catch (...) {
    // the stack's statistics could not be read: keep waiting for a plan
  }
}

void mm_free(void* p) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    g_alloc->deallocate(p);
  } catch (const std::exception& e) {
    // As glibc does for a double free: the heap can no longer be trusted.
    std::fprintf(stderr, "modelmem preload: free(%p): %s\n", p, e.what());
    std::abort();
  }
}

std::size_t mm_size(const void* p) noexcept {
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    return g_alloc->block_size(p);
  } catch (...) {
    return 0;
  }
}

bool give_back_address_space(std::size_t size) noexcept {
  if (g_region == nullptr) return false;
  static std::atomic<bool> told{false};
  const int saved = errno;
  Inside inside;
  std::size_t released = 0;
  {
    std::lock_guard lock(g_mutex);
    try {
      g_alloc->trim();  // cached free segments back to the region first
    } catch (...) {
    }
    released = g_region->release_unused();
  }
  if (released > 0 && !told.exchange(true)) {
    try {
      std::fprintf(stderr,
                   "modelmem preload: the C library could not map %s: %s of the address space "
                   "reserved for large requests, unused, was given back to it (an address-space "
                   "limit, RLIMIT_AS); further ones are not printed\n",
                   format_bytes(size).c_str(), format_bytes(released).c_str());
    } catch (...) {
    }
  }
  errno = saved;
  return released > 0;
}

std::size_t mm_trim() noexcept {
  if (g_state.load(std::memory_order_acquire) != kReady || g_alloc == nullptr) return 0;
  Inside inside;
  std::lock_guard lock(g_mutex);
  try {
    const auto before = g_alloc->stats().reserved_bytes.all.current;
    g_alloc->trim();
    const auto after = g_alloc->stats().reserved_bytes.all.current;
    return before > after ? static_cast<std::size_t>(before - after) : 0;
  } catch (...) {
    return 0;
  }
}

// Requests served by modelmem; the sizes of the others are left to the next allocator.
void* large_malloc(std::size_t size) noexcept {
  void* p = mm_allocate(size);
  if (p == nullptr) {
    if (quota_refused()) return nullptr;
    g_large_libc.fetch_add(1, std::memory_order_relaxed);
    p = next_malloc(size);
    if (p == nullptr && give_back_address_space(size)) p = next_malloc(size);
  }
  return p;
}

void* large_aligned(std::size_t size, std::size_t alignment) noexcept {
  void* p = mm_allocate(size);
  if (p != nullptr) {
    // Every strategy aligns to 256 bytes but the system one (64, its `alignment`): a block below
    // what was asked goes back, and the request to the next allocator.
    if (reinterpret_cast<std::uintptr_t>(p) % alignment == 0) return p;
    mm_free(p);
  } else if (quota_refused()) {
    return nullptr;
  }
  g_large_libc.fetch_add(1, std::memory_order_relaxed);
  return next_memalign(alignment, size);
}

void fork_prepare() {
  g_mutex.lock();
}
void fork_parent() {
  g_mutex.unlock();
}
void fork_child() {
  trace_fork_child();
  g_mutex.unlock();
}

}  // namespace modelmem::preload

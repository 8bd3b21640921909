// The C allocation functions of libmodelmem_preload.so (malloc, free, calloc, realloc,
// posix_memalign, aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size) and two test
// hooks. LD_PRELOAD the library into any process to serve large heap requests from a modelmem
// strategy (MODELMEM_ALLOC_CONF, e.g. strategy:planned) and everything else from the next
// allocator in the lookup order: the C library, or an allocator preloaded after this one
// (LD_PRELOAD="libmodelmem_preload.so libmimalloc.so.2" gives small requests to mimalloc).
//
// Each function routes one request: a small one through the small-block cache (cache_glue.hpp)
// when the next allocator is the C library, a large one to the strategy (strategy.hpp), a
// pointer home by where it lies (ours(), in_bootstrap()), everything else to the next allocator
// (next_allocator.hpp). state.hpp lists the other files of the library.
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "bootstrap.hpp"
#include "cache_glue.hpp"
#include "next_allocator.hpp"
#include "state.hpp"
#include "strategy.hpp"

namespace modelmem::preload {
namespace {

bool valid_alignment(std::size_t a) noexcept {
  return a != 0 && (a & (a - 1)) == 0;
}

void* aligned(std::size_t alignment, std::size_t size) noexcept {
  if (alignment <= kCacheAlign && cached_request(size)) return cache_allocate(size, alignment);
  if (size >= g_threshold && alignment <= kMaxAlignment && ready())
    return large_aligned(size, alignment);
  return next_memalign(alignment, size);
}

}  // namespace
}  // namespace modelmem::preload

using namespace modelmem::preload;

extern "C" {

/// For tests: 2 once the library serves requests, 0 before, 1 while it initialises, 3 when off.
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
  count_waiting_request();
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
    void* q = next_calloc(n, size);
    if (q == nullptr && give_back_address_space(total)) q = next_calloc(n, size);
    return q;
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
    void* r = n->realloc(ptr, size);
    if (r == nullptr && give_back_address_space(size)) r = n->realloc(ptr, size);
    return r;
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

// What a program asks of the allocator when it wants memory back now (a server that dropped a
// model): modelmem's cached free segments go back to the OS, the calling thread's small-block
// cache to the C library, and then the C library trims its own heap.
__attribute__((visibility("default"))) int malloc_trim(size_t pad) {
  const std::size_t released = mm_trim();
  if (cache_ready() && t_cache.bytes > 0) {
    t_cache.drain([](void* p) { g_next.free(p); });
    flush_cache_counters(t_cache);
  }
  using Trim = int (*)(size_t);
  static Trim next_trim = reinterpret_cast<Trim>(dlsym(RTLD_NEXT, "malloc_trim"));
  const int theirs = next_trim != nullptr ? next_trim(pad) : 0;
  return released > 0 || theirs != 0 ? 1 : 0;
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* ptr) {
  if (ptr == nullptr) return 0;
  if (ours(ptr)) return mm_size(ptr);
  if (in_bootstrap(ptr)) return bootstrap_size(ptr);
  const NextAllocator* n = next();
  return n ? n->usable(ptr) : 0;
}

}  // extern "C"

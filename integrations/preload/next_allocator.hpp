// The allocator after this library in the lookup order (the C library, or one preloaded after
// modelmem): its functions are looked up with dlsym(RTLD_NEXT) on the first call of any of
// ours, before anything is handed out, so every small block is made and freed by the same
// allocator. While this thread runs the lookup, next() is null and requests go to the bootstrap
// buffer (bootstrap.hpp).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <string>

#include "bootstrap.hpp"

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

struct NextAllocator {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void* (*memalign)(size_t, size_t);
  size_t (*usable)(void*);
};

extern NextAllocator g_next;
extern std::atomic<bool> g_next_ready;
extern pthread_once_t g_next_once;
// Set while this thread looks the next allocator up: its requests go to the bootstrap buffer.
extern __thread bool t_resolving __attribute__((tls_model("initial-exec")));

/// Looks the next allocator up (once, through g_next_once); aborts when there is none.
void resolve_next();

// The next allocator, or nullptr while this thread is looking it up (use the bootstrap buffer).
inline const NextAllocator* next() noexcept {
  if (__builtin_expect(g_next_ready.load(std::memory_order_acquire), 1)) return &g_next;
  if (t_resolving) return nullptr;
  pthread_once(&g_next_once, resolve_next);
  return &g_next;
}

inline void* next_malloc(std::size_t size) noexcept {
  const NextAllocator* n = next();
  return n ? n->malloc(size) : bootstrap_alloc(size);
}

inline void* next_memalign(std::size_t alignment, std::size_t size) noexcept {
  const NextAllocator* n = next();
  return n ? n->memalign(alignment, size) : bootstrap_alloc(size, alignment);
}

inline void* next_calloc(std::size_t count, std::size_t size) noexcept {
  const NextAllocator* n = next();
  if (n) return n->calloc(count, size);
  std::size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return bootstrap_alloc(total);  // static memory, never reused: still zero
}

/// A name for the report: the file the next malloc lives in.
std::string next_name();

}  // namespace modelmem::preload

#pragma GCC visibility pop

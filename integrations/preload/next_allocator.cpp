// Finding the next allocator (see next_allocator.hpp).
#include "next_allocator.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

namespace modelmem::preload {

NextAllocator g_next{};
std::atomic<bool> g_next_ready{false};
pthread_once_t g_next_once = PTHREAD_ONCE_INIT;

namespace {

template <typename Fn>
Fn lookup(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

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

std::string next_name() {
  Dl_info info{};
  if (g_next_ready.load(std::memory_order_acquire) &&
      dladdr(reinterpret_cast<void*>(g_next.malloc), &info) != 0 && info.dli_fname != nullptr)
    return info.dli_fname;
  return "?";
}

}  // namespace modelmem::preload

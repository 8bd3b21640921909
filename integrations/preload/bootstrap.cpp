// The bootstrap buffer (see bootstrap.hpp).
#include "bootstrap.hpp"

#include <errno.h>

#include <atomic>
#include <cstring>

namespace modelmem::preload {

alignas(64) unsigned char g_bootstrap[kBootstrapBytes];

namespace {
std::atomic<std::size_t> g_bootstrap_used{0};
}  // namespace

void* bootstrap_alloc(std::size_t size, std::size_t alignment) noexcept {
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
}  // namespace modelmem::preload

// Requests made while the next allocator is being looked up (dlsym's own bookkeeping): bumped
// out of a static buffer, never reused, freed as no-ops. Each block starts after a 16-byte
// header holding its size.
#pragma once

#include <cstddef>

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

constexpr std::size_t kBootstrapBytes = 64u << 10;
extern unsigned char g_bootstrap[kBootstrapBytes];

inline bool in_bootstrap(const void* p) noexcept {
  auto* b = static_cast<const unsigned char*>(p);
  return b >= g_bootstrap && b < g_bootstrap + kBootstrapBytes;
}

/// A block of `size` bytes from the buffer (ENOMEM and null when it is full).
void* bootstrap_alloc(std::size_t size, std::size_t alignment = 16) noexcept;
/// The size a bootstrap block was asked with.
std::size_t bootstrap_size(const void* p) noexcept;

}  // namespace modelmem::preload

#pragma GCC visibility pop

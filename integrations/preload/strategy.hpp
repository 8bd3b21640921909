// Large requests served by the modelmem strategy (under g_mutex, inside modelmem so its own
// containers use the C heap), and the fork handlers that keep g_mutex usable in a child.
#pragma once

#include <cerrno>
#include <cstddef>

#pragma GCC visibility push(hidden)

namespace modelmem::preload {

/// Set by mm_allocate when it refused a request for a pool's quota: the caller must not give it
/// to the next allocator (the quota would mean nothing then).
extern __thread bool t_quota_refused __attribute__((tls_model("initial-exec")));

/// A block from the strategy, or null when it refuses (the caller falls back, unless
/// quota_refused() says a quota refused it).
void* mm_allocate(std::size_t size) noexcept;
/// Gives a block back; aborts on a double free, as glibc does.
void mm_free(void* p) noexcept;
/// The requested size of a live modelmem block (0 when unknown).
std::size_t mm_size(const void* p) noexcept;
/// Gives back every cached free segment of the strategy (malloc_trim); the bytes given back.
std::size_t mm_trim() noexcept;
/// mm_allocate, else the next allocator (counted as refused); null when a quota refused it.
void* large_malloc(std::size_t size) noexcept;
/// After the next allocator failed a request of `size` bytes: under an address-space limit the
/// reservation's unused end goes back to the OS (modelmem's cached free segments first), so
/// that the next allocator may map it. True when something was given back (then try again).
bool give_back_address_space(std::size_t size) noexcept;
/// large_malloc for an aligned request (posix_memalign, aligned_alloc, memalign): a block of the
/// strategy when it lies at a multiple of `alignment`, else the next allocator's memalign, never
/// its malloc (16 bytes): a full pool must not turn an aligned request into a misaligned block.
void* large_aligned(std::size_t size, std::size_t alignment) noexcept;

/// After mm_allocate returned nullptr: true (errno ENOMEM) when a quota refused the request.
inline bool quota_refused() noexcept {
  if (!t_quota_refused) return false;
  t_quota_refused = false;
  errno = ENOMEM;
  return true;
}

void fork_prepare();
void fork_parent();
void fork_child();

}  // namespace modelmem::preload

#pragma GCC visibility pop

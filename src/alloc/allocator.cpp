#include "modelmem/alloc/allocator.hpp"

#include <chrono>
#include <functional>
#include <thread>

namespace modelmem::alloc {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t this_thread_id() noexcept {
  // Small dense ids (0, 1, 2, ... in order of first use) read better in traces than pthread ids.
  static std::atomic<std::uint64_t> next{0};
  thread_local std::uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

}  // namespace modelmem::alloc

// Allocator events (a block handed out or returned, a segment obtained or given back, pages
// mapped, an OOM, a step mark) and the Listener that receives them: what traces, the monitor and
// the Python MemoryLogger are built on. Events carry no strings but a mark's static label.
#pragma once

#include <cstddef>
#include <cstdint>

#include "modelmem/alloc/types.hpp"

namespace modelmem::alloc {

/// What a Listener is told about.
enum class EventKind : std::uint8_t {
  kAlloc,         ///< a block handed to a caller
  kFree,          ///< a block returned by a caller
  kSegmentAlloc,  ///< memory obtained from the device
  kSegmentFree,   ///< memory returned to the device
  kMap,           ///< physical pages mapped into a reserved range
  kUnmap,         ///< physical pages unmapped
  kOom,           ///< an allocation failed
  kMark,          ///< a user annotation (step boundary, ...); `label` says which
};

struct Event {
  EventKind kind;
  std::uint64_t time_ns;  ///< steady clock
  std::uintptr_t address;
  std::size_t size;  ///< bytes requested (kAlloc), block size (kFree), segment size, ...
  Stream stream;
  std::uint32_t pool;  ///< pool / partition index, 0 when there is one pool
  std::uint64_t thread;
  const char* label;  ///< kMark only; points to static or caller-owned storage
};

/// Receives allocator events. Called synchronously on the allocating thread, possibly under
/// the allocator's lock: must be fast, must not allocate through the same allocator, and must
/// not throw.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual void on_event(const Event& event) noexcept = 0;
};

std::uint64_t now_ns() noexcept;
std::uint64_t this_thread_id() noexcept;

}  // namespace modelmem::alloc

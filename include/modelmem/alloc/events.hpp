// Allocator events (a block handed out or returned, a segment obtained or given back, pages
// mapped, an OOM, a step mark) and the Listener that receives them: what traces, the monitor and
// the Python MemoryLogger are built on. Events carry no strings but a mark's static label.
//
// Each kind's fields, defined once here (the functions below build the block events and marks
// for the Allocator base class; strategies emit the device events with the same meanings):
//
//   kind          address             size                      stream      pool
//   kAlloc        the block           bytes requested           its stream  router pool + 1
//   kFree         the block           bytes requested, as its   its stream  router pool + 1
//                                     kAlloc said
//   kOom          0                   bytes requested           its stream  router pool + 1
//   kSegmentAlloc the segment / range bytes obtained            its stream  partition index
//   kSegmentFree  the segment / range bytes returned            its stream  partition index
//   kMap, kUnmap  first page          bytes (whole pages)       its stream  partition index
//   kMark         0                   0                         0           0; label says which
#pragma once

#include <atomic>
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
  std::size_t size;  ///< see the table above: requested bytes for kAlloc and kFree alike
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

/// Stamps a pool index on every event and passes it on to whatever listener `target` holds
/// now (none: dropped). Routers and partitions give each pool's stack one.
class PoolRelay final : public Listener {
 public:
  PoolRelay(const std::atomic<Listener*>* target, std::uint32_t pool) noexcept
      : target_(target), pool_(pool) {}
  void on_event(const Event& event) noexcept override {
    Listener* l = target_->load(std::memory_order_acquire);
    if (l == nullptr) return;
    Event e = event;
    e.pool = pool_;
    l->on_event(e);
  }

 private:
  const std::atomic<Listener*>* target_;
  std::uint32_t pool_;
};

std::uint64_t now_ns() noexcept;
std::uint64_t this_thread_id() noexcept;

/// The block events and marks, stamped with the time and thread now.
inline Event block_event(EventKind kind, std::uintptr_t address, std::size_t requested,
                         Stream stream, std::uint32_t pool) noexcept {
  return Event{kind, now_ns(), address, requested, stream, pool, this_thread_id(), nullptr};
}
inline Event oom_event(std::size_t requested, Stream stream, std::uint32_t pool = 0) noexcept {
  return Event{EventKind::kOom, now_ns(), 0, requested, stream, pool, this_thread_id(), nullptr};
}
inline Event mark_event(const char* label) noexcept {
  return Event{EventKind::kMark, now_ns(), 0, 0, 0, 0, this_thread_id(), label};
}

}  // namespace modelmem::alloc

// The one interface every allocation strategy implements (static arena, caching pool, expandable
// segments, planned arena, and adaptors such as quotas and tracing). All implementations are
// thread-safe. Statistics are in alloc/stats.hpp, events and listeners in alloc/events.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/alloc/events.hpp"
#include "modelmem/alloc/stats.hpp"
#include "modelmem/alloc/types.hpp"

namespace modelmem::alloc {

class Allocator {
 public:
  virtual ~Allocator() = default;

  /// Returns a block of at least `size` bytes, aligned to at least 256 bytes (64 for host
  /// strategies that say so). Throws OutOfMemory (or QuotaExceeded), InvalidInput for size 0.
  virtual void* allocate(std::size_t size, Stream stream = 0) = 0;
  /// Returns a block. Throws InvalidInput for a pointer this allocator did not hand out or
  /// already took back (double free); the allocator's state is unchanged then.
  virtual void deallocate(void* ptr) = 0;
  /// A consistent snapshot.
  virtual Stats stats() const = 0;
  virtual void reset_peak() = 0;
  /// Returns cached, unused memory to the device.
  virtual void trim() {}
  /// A one-line description: strategy and its effective settings.
  virtual std::string describe() const = 0;
  /// Step marks, for strategies that learn from a repeating pattern; others pass them to
  /// listeners only.
  virtual void begin_step() { emit_mark("step_begin"); }
  virtual void end_step() { emit_mark("step_end"); }

  /// Installs (or with nullptr removes) the event listener. The caller keeps it alive until it
  /// is removed. When none is set, each event costs one predictable branch.
  void set_listener(Listener* listener) noexcept {
    listener_.store(listener, std::memory_order_release);
  }
  Listener* listener() const noexcept { return listener_.load(std::memory_order_acquire); }

  /// Records a notice (e.g. the expandable-segments fallback) that stats() reports in
  /// Stats::warnings for the allocator's lifetime. The one warning channel: every strategy and
  /// adaptor reports these (after those of the allocators it wraps). Thread-safe; off the hot
  /// path.
  void add_warning(std::string text) {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    warnings_.push_back(std::move(text));
  }
  std::vector<std::string> warnings() const {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    return warnings_;
  }

 protected:
  /// Appends this allocator's warnings to a snapshot; every stats() ends with it.
  Stats with_warnings(Stats s) const {
    std::vector<std::string> own = warnings();
    s.warnings.insert(s.warnings.end(), own.begin(), own.end());
    return s;
  }

  void emit(EventKind kind, std::uintptr_t address, std::size_t size, Stream stream = 0,
            std::uint32_t pool = 0) const noexcept {
    Listener* l = listener_.load(std::memory_order_acquire);
    if (l == nullptr) [[likely]]
      return;
    l->on_event(Event{kind, now_ns(), address, size, stream, pool, this_thread_id(), nullptr});
  }
  void emit_mark(const char* label) const noexcept {
    Listener* l = listener_.load(std::memory_order_acquire);
    if (l == nullptr) [[likely]]
      return;
    l->on_event(Event{EventKind::kMark, now_ns(), 0, 0, 0, 0, this_thread_id(), label});
  }

 private:
  std::atomic<Listener*> listener_{nullptr};
  mutable std::mutex warnings_mutex_;
  std::vector<std::string> warnings_;
};

}  // namespace modelmem::alloc

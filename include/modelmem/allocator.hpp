// The one interface every allocation strategy implements (static arena, caching pool, expandable
// segments, planned arena, and adaptors such as quotas and tracing), plus the statistics and the
// event hook they share. All implementations are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace modelmem::alloc {

/// Opaque stream handle (a cudaStream_t on CUDA; 0 is the default stream).
using Stream = std::uintptr_t;

/// One statistic, as PyTorch reports it.
struct Counter {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  ///< total ever added
  std::int64_t freed = 0;      ///< total ever removed

  void add(std::int64_t n) noexcept {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(std::int64_t n) noexcept {
    current -= n;
    freed += n;
  }
  void reset_peak() noexcept { peak = current; }
};

enum class PoolKind : int { kAll = 0, kSmall = 1, kLarge = 2 };

/// PyTorch's cut between the small and the large pool (requests of at most 1 MiB are small);
/// strategies without pools of their own use it to split their statistics the same way.
inline constexpr std::size_t kSmallRequestBytes = std::size_t{1} << 20;
inline PoolKind pool_of_request(std::size_t bytes) noexcept {
  return bytes <= kSmallRequestBytes ? PoolKind::kSmall : PoolKind::kLarge;
}

/// A counter for all pools together and for the small and large pools separately.
struct CounterSet {
  Counter all, small, large;
  Counter& operator[](PoolKind k) noexcept {
    return k == PoolKind::kSmall ? small : k == PoolKind::kLarge ? large : all;
  }
  const Counter& operator[](PoolKind k) const noexcept {
    return k == PoolKind::kSmall ? small : k == PoolKind::kLarge ? large : all;
  }
  /// Adds to the total and to one pool's counter (kSmall or kLarge).
  void add(PoolKind k, std::int64_t n) noexcept {
    all.add(n);
    (*this)[k].add(n);
  }
  void sub(PoolKind k, std::int64_t n) noexcept {
    all.sub(n);
    (*this)[k].sub(n);
  }
  void reset_peak() noexcept {
    all.reset_peak();
    small.reset_peak();
    large.reset_peak();
  }
};

/// Statistics with PyTorch's names where they match (torch.cuda.memory_stats()).
struct Stats {
  CounterSet allocated_bytes;       ///< bytes in blocks handed to callers (after rounding)
  CounterSet reserved_bytes;        ///< bytes obtained from the device
  CounterSet active_bytes;          ///< allocated, plus freed blocks not yet reusable (streams)
  CounterSet inactive_split_bytes;  ///< free bytes inside split segments
  CounterSet requested_bytes;       ///< bytes callers asked for (before rounding)
  CounterSet allocation;            ///< number of blocks handed out
  CounterSet segment;               ///< number of device segments
  CounterSet active;                ///< number of active blocks
  CounterSet inactive_split;        ///< number of free blocks inside split segments
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::size_t largest_free_block = 0;  ///< largest block servable without asking the device
  std::vector<std::string> warnings;   ///< e.g. the expandable-segments fallback notice

  /// A block handed to a caller (`handed_out`) or taken back, in pool `k`: moves
  /// allocated_bytes and active_bytes by `bytes`, requested_bytes by `requested`, and the
  /// allocation and active counts by one. Strategies whose blocks are not split inside
  /// segments (static, system, direct, planned) count every block this way.
  void count_block(PoolKind k, std::size_t bytes, std::size_t requested, bool handed_out) noexcept {
    const auto b = static_cast<std::int64_t>(bytes);
    const auto r = static_cast<std::int64_t>(requested);
    if (handed_out) {
      allocated_bytes.add(k, b);
      active_bytes.add(k, b);
      requested_bytes.add(k, r);
      allocation.add(k, 1);
      active.add(k, 1);
    } else {
      allocated_bytes.sub(k, b);
      active_bytes.sub(k, b);
      requested_bytes.sub(k, r);
      allocation.sub(k, 1);
      active.sub(k, 1);
    }
  }

  /// A segment of `bytes` obtained from the device (`obtained`) or returned to it, in pool `k`:
  /// moves reserved_bytes by `bytes` and the segment count by one, and counts one device call.
  void count_segment(PoolKind k, std::size_t bytes, bool obtained) noexcept {
    const auto b = static_cast<std::int64_t>(bytes);
    if (obtained) {
      reserved_bytes.add(k, b);
      segment.add(k, 1);
      ++num_device_alloc;
    } else {
      reserved_bytes.sub(k, b);
      segment.sub(k, 1);
      ++num_device_free;
    }
  }

  /// 1 - largest_free_block / (reserved - allocated): 0 when all free memory is one block.
  double fragmentation() const noexcept {
    auto free_bytes = reserved_bytes.all.current - allocated_bytes.all.current;
    if (free_bytes <= 0) return 0.0;
    return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
  }
};

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
  /// Stats::warnings for the allocator's lifetime. Thread-safe; off the hot path.
  void add_warning(std::string text) {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    warnings_.push_back(std::move(text));
  }
  std::vector<std::string> warnings() const {
    std::lock_guard<std::mutex> lock(warnings_mutex_);
    return warnings_;
  }

 protected:
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

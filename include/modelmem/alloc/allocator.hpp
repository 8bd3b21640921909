// The one contract every allocation strategy (static arena, caching pool, expandable segments,
// planned arena, system, direct) and adaptor (quota, pool router) keeps, written once here as
// RMM's device_memory_resource does: the public functions are not virtual; they validate the
// request, emit the events (alloc/events.hpp defines each event's fields), check the invariants
// in builds that ask for it, and call the private `do_*` hooks a strategy implements. A
// strategy implements only hooks; it never emits a block event or checks a size of 0 itself.
//
// The query interface answers what callers used to find by casting to a concrete strategy:
// upstream() (the allocator an adaptor forwards to), block_size() (a live block's size),
// pools() (the named pools a router dispatches to), describe(), stats() (with the planned
// arena's own numbers in Stats::planned wherever it sits in the stack).
//
// All implementations are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "modelmem/alloc/events.hpp"
#include "modelmem/alloc/stats.hpp"
#include "modelmem/alloc/types.hpp"

namespace modelmem::alloc {

class Allocator;

/// A named pool of a PoolRouter (pools()).
struct NamedPool {
  std::string name;
  std::size_t quota = 0;  ///< bytes; reported to monitors
  std::shared_ptr<Allocator> allocator;
  bool is_default = false;  ///< set by the router: requests of threads that selected none
};

/// What the allocator knows of one live block (block()).
struct LiveBlock {
  std::size_t size = 0;    ///< bytes the caller asked for; 0 = not a live block of this allocator
  Stream stream = 0;       ///< the stream it was allocated on
  std::uint32_t pool = 0;  ///< the pool it came from (a router's pool index + 1), else 0
};

class Allocator {
 public:
  Allocator();
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  /// Returns a block of at least `size` bytes, aligned to at least 256 bytes (64 for host
  /// strategies that say so). Throws OutOfMemory (or QuotaExceeded), InvalidInput for size 0.
  /// Emits kAlloc, or kOom when it throws OutOfMemory.
  void* allocate(std::size_t size, Stream stream = 0) {
    if (size == 0) [[unlikely]]
      refuse_zero_size();
    if (observed()) [[unlikely]]
      return allocate_observed(size, stream);
    return do_allocate(size, stream);
  }
  /// Returns a block (nullptr: nothing happens). Throws InvalidInput for a pointer this
  /// allocator did not hand out or already took back (double free); the allocator's state is
  /// unchanged then. Emits kFree before the block can be handed out again.
  void deallocate(void* ptr) {
    if (ptr == nullptr) [[unlikely]]
      return;
    if (observed()) [[unlikely]]
      return deallocate_observed(ptr);
    do_deallocate(ptr);
  }
  /// A consistent snapshot, with the warnings of add_warning() last.
  Stats stats() const;
  /// Every peak becomes its current value.
  void reset_peak();
  /// Returns cached, unused memory to the device.
  void trim();
  /// A one-line description: strategy and its effective settings.
  std::string describe() const { return do_describe(); }
  /// Step marks, for strategies that learn from a repeating pattern; listeners see a kMark.
  void begin_step();
  void end_step();

  /// The live block at `ptr` (its requested size, stream and pool), or size 0 when `ptr` is
  /// not a live block of this allocator. Takes the allocator's lock: not for the hot path.
  LiveBlock block(const void* ptr) const { return ptr == nullptr ? LiveBlock{} : do_block(ptr); }
  /// The requested size of the live block at `ptr`, 0 if it is not one.
  std::size_t block_size(const void* ptr) const { return block(ptr).size; }
  /// The allocator this one forwards requests to (a quota's upstream, the planned arena's
  /// fallback, a router's main stack); nullptr for a strategy that serves everything itself.
  Allocator* upstream() const noexcept { return do_upstream(); }
  /// The named pools this allocator dispatches to (a PoolRouter's); empty for every other.
  std::span<const NamedPool> pools() const noexcept { return do_pools(); }
  /// Checks the allocator's invariants under its lock (structure, and statistics equal to a
  /// recount of its blocks). Returns the first violation found, or "". O(blocks): it walks the
  /// whole structure, its upstream's and pools' included. Builds with
  /// MODELMEM_CHECK_INVARIANTS (the sanitizer build of scripts/test), or any process started
  /// with MODELMEM_CHECK_INVARIANTS=1, check after every operation and abort on a violation:
  /// the cheap local checks every time, this walk on the schedule of walk_period().
  std::string check_invariants() const { return do_check_invariants(); }
  /// How many elements (blocks, free ranges, segments, routed blocks) check_invariants() walks:
  /// this allocator's, its upstream's and its pools'. O(pools).
  std::size_t invariant_size() const;
  /// The walk's schedule in checking builds: operations from one whole-structure walk to the
  /// next, for a structure of `size` elements. Every operation while the structure has at most
  /// kWalkBudget elements, then one walk every size / kWalkBudget operations, so that walks
  /// visit at most about kWalkBudget elements per operation: a long run stays linear in its
  /// number of operations. The local checks still run on every operation.
  static constexpr std::size_t kWalkBudget = 64;
  static constexpr std::uint64_t walk_period(std::size_t size) noexcept {
    return size <= kWalkBudget ? 1 : size / kWalkBudget;
  }

  /// Installs (or with nullptr removes) the event listener. The caller keeps it alive until it
  /// is removed. An adaptor passes it on to the allocators it forwards to, which then report
  /// their device events (segments, pages, automatic step marks) to it while the adaptor
  /// reports the block events, so every event reaches the listener exactly once. When none is
  /// set, each operation costs one predictable branch.
  void set_listener(Listener* listener) noexcept { attach(listener, true); }
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
  /// Device-side events (kSegmentAlloc, kSegmentFree, kMap, kUnmap) and automatic step marks,
  /// emitted by a strategy from inside its hooks; block events are the base's.
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
    l->on_event(mark_event(label));
  }
  /// For adaptors' do_set_listener: `upstream` reports its device events to `listener` and
  /// leaves the block events to the adaptor.
  static void attach_upstream(Allocator& upstream, Listener* listener) noexcept {
    upstream.attach(listener, false);
  }

 private:
  // The hooks. do_allocate gets a size > 0; do_deallocate a non-null pointer and throws
  // InvalidInput, state unchanged, for one that is not a live block.
  virtual void* do_allocate(std::size_t size, Stream stream) = 0;
  virtual void do_deallocate(void* ptr) = 0;
  virtual Stats do_stats() const = 0;
  virtual void do_reset_peak() = 0;
  virtual void do_trim() {}
  virtual std::string do_describe() const = 0;
  virtual void do_begin_step() {}
  virtual void do_end_step() {}
  virtual LiveBlock do_block(const void* ptr) const = 0;
  virtual Allocator* do_upstream() const noexcept { return nullptr; }
  virtual std::span<const NamedPool> do_pools() const noexcept { return {}; }
  virtual std::string do_check_invariants() const { return {}; }
  /// The O(1) checks run after every operation in checking builds (counters against each other
  /// and against the sizes of the containers), without walking; "" when sound.
  virtual std::string do_check_local() const { return {}; }
  /// The elements do_check_invariants() visits itself (not its upstream's); O(1).
  virtual std::size_t do_invariant_size() const { return 0; }
  /// Adaptors pass a new listener on to what they forward to (attach_upstream).
  virtual void do_set_listener(Listener*) noexcept {}

  bool observed() const noexcept {
    return checking_ || (outer_.load(std::memory_order_relaxed) &&
                         listener_.load(std::memory_order_relaxed) != nullptr);
  }
  void attach(Listener* listener, bool outer) noexcept;
  [[noreturn]] void refuse_zero_size() const;
  void* allocate_observed(std::size_t size, Stream stream);
  void deallocate_observed(void* ptr);
  /// Checking builds: the local checks (and, after an allocate, that `block` is live with
  /// `size` bytes), then the whole walk when its schedule says so; aborts with a violation.
  void verify(const char* after, const void* block = nullptr, std::size_t size = 0) const;
  /// Counts the operation; true when it is the one that walks the whole structure.
  bool walk_due() const noexcept;

  std::atomic<Listener*> listener_{nullptr};
  std::atomic<bool> outer_{true};  // reports block events (false: an adaptor above does)
  bool checking_ = false;          // check the invariants after every operation
  mutable std::atomic<std::uint64_t> checked_ops_{0};  // operations checked so far
  mutable std::atomic<std::uint64_t> next_walk_{0};    // the operation that walks next
  mutable std::mutex warnings_mutex_;
  std::vector<std::string> warnings_;
};

}  // namespace modelmem::alloc

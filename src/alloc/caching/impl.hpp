// The caching pool's internals, shared by the files of src/alloc/caching/ (one job each):
//   pool.cpp               the policy: sizes, best fit, split and merge, fixed segments, the
//                          out-of-memory ladder, the locked allocate/free
//   thread_cache.cpp       the per-thread caches and their membarrier protocol, the entry points
//   expandable_segment.cpp virtual-memory ranges mapped page by page
//   caching_allocator.cpp  construction, statistics, description, teardown
//   invariants.cpp         the invariant checker (CachingAllocator::check_invariants)
//
// Structure: segments are split into blocks kept in a doubly linked list per segment, free
// blocks sit in one ordered set per pool keyed by (stream, size, address), so best fit is one
// lower_bound. The policy follows PyTorch's CUDA caching allocator.
//
// Invariants (checked by check_invariants(), called after every operation by the random and
// stress tests when built with MODELMEM_CHECK_INVARIANTS; relied on everywhere):
//  - The blocks of a segment tile it exactly, in address order, with no gap.
//  - A free block is in exactly one place: its pool's free set when mapped and not pending, its
//    segment's `unmapped` set when not mapped; pending blocks (freed, waiting on other streams)
//    and allocated blocks are in no set. Allocated blocks are in `active_`.
//  - No two adjacent blocks are both free-in-pool (they are merged), nor both unmapped.
//  - Expandable segments only: unmapped blocks start and end on page boundaries, so a page is
//    mapped exactly when some mapped block overlaps it.
//  - The statistics equal a recount of the blocks (less what thread caches hold).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc::caching {

struct Segment;
struct ThreadCache;

// Where a block stands with respect to the thread caches. kTcLive: handed out and known to the
// cache `tc_owner`, whose owner thread may take it back without the pool's lock; kTcParked:
// freed into that cache (still counted as allocated by the pool, which does not touch it).
enum : std::uint8_t { kTcNone = 0, kTcLive = 1, kTcParked = 2 };

struct Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
  std::size_t requested_counted = 0;  // what the pool's own statistics counted for it
  Stream stream = 0;
  Segment* segment = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::uint64_t free_tick = 0;  // when it last became free (garbage collection age)
  std::vector<Stream> stream_uses;
  bool allocated = false;
  bool mapped = true;
  bool pending = false;
  bool small_request = false;  // which pool's statistics it counts in while in use
  // Changed only with exclusive access to `tc_owner` (see ThreadCache); atomic so that the pool
  // may read it under its lock while the owner thread works on its cache.
  std::atomic<std::uint8_t> tc_state{kTcNone};
  ThreadCache* tc_owner = nullptr;  // written under the pool's lock only

  void reset() noexcept {
    addr = 0;
    size = requested = requested_counted = 0;
    stream = 0;
    segment = nullptr;
    prev = next = nullptr;
    free_tick = 0;
    stream_uses.clear();
    allocated = pending = small_request = false;
    mapped = true;
    tc_state.store(kTcNone, std::memory_order_relaxed);
    tc_owner = nullptr;
  }

  bool is_split() const noexcept { return prev != nullptr || next != nullptr; }
  bool in_pool() const noexcept { return !allocated && !pending && mapped; }
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const noexcept {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->addr < b->addr;
  }
};

struct ByAddress {
  bool operator()(const Block* a, const Block* b) const noexcept { return a->addr < b->addr; }
};

using FreeSet = std::pmr::set<Block*, BySize>;
using AddressSet = std::pmr::set<Block*, ByAddress>;

struct Segment {
  Segment(std::pmr::memory_resource* mr) : unmapped(mr) {}
  std::uintptr_t base = 0;
  std::size_t size = 0;  // fixed: bytes from the device; expandable: bytes reserved
  bool expandable = false;
  bool small = false;
  Stream stream = 0;
  std::size_t mapped = 0;  // expandable: bytes mapped
  Block* head = nullptr;
  AddressSet unmapped;  // expandable: unmapped blocks
};

inline constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
inline constexpr int kFirstFitScan = 64;

// ---------------------------------------------------------------- thread caches
//
// A thread cache parks blocks its owner thread frees and hands them back to the same thread
// for the same (rounded size, stream) without taking the pool's lock. Everything in it is
// plain data with one rule: exactly one party works on a cache at a time, either its owner
// thread between enter() and leave(), or a thread holding the pool's lock between claim() and
// unclaim() (to take parked blocks back on trim or out of memory, to settle a block that
// another thread frees, to read nothing else). The owner never waits; a claimer waits for the
// owner to leave. With membarrier(2) entering costs two plain stores and a load (the claimer
// pays for the fence); without it, one atomic exchange.

inline constexpr int kBins = 16;
inline constexpr int kSlotsPerBin = 8;
inline constexpr int kTableSize = 256;  // direct-mapped: pointer -> live block known to this cache

struct ThreadCache {
  std::atomic<int> busy{0};           // owner inside an operation (atomic mode: 2 = claimed)
  std::atomic<int> claimed{0};        // membarrier mode: a claimer wants the cache
  std::atomic<bool> orphaned{false};  // owner thread gone; a new thread may adopt the cache

  struct Bin {
    std::size_t size = 0;
    Stream stream = 0;
    int n = 0;
    Block* slot[kSlotsPerBin] = {};
  };
  struct Entry {
    std::uintptr_t ptr = 0;
    Block* block = nullptr;
  };
  Bin bins[kBins];
  Entry table[kTableSize];
  int hint = 0;
  std::size_t parked_bytes = 0;
  // Totals, written with exclusive access, read by stats() at any time: parked (freed into
  // the cache) and hits (handed out again): bytes, requested bytes, blocks.
  std::atomic<std::int64_t> parks_b{0}, parks_r{0}, parks_n{0};
  std::atomic<std::int64_t> hits_b{0}, hits_r{0}, hits_n{0};

  static std::size_t slot_of(std::uintptr_t p) noexcept {
    return ((p >> 9) ^ (p >> 17)) & (kTableSize - 1);
  }
  void remember(Block* b) noexcept { table[slot_of(b->addr)] = Entry{b->addr, b}; }
  void forget(std::uintptr_t p) noexcept {
    Entry& e = table[slot_of(p)];
    if (e.ptr == p) e = Entry{};
  }
  // The bin for (size, stream); with `claim`, an empty bin is taken over if none matches.
  [[gnu::always_inline]] Bin* bin(std::size_t size, Stream stream, bool claim) noexcept {
    Bin* h = &bins[hint];
    if (h->size == size && h->stream == stream) [[likely]]
      return h;
    return search(size, stream, claim);
  }
  [[gnu::noinline]] Bin* search(std::size_t size, Stream stream, bool claim) noexcept {
    Bin* empty = nullptr;
    for (int i = 0; i < kBins; ++i) {
      Bin& b = bins[i];
      if (b.size == size && b.stream == stream) {
        hint = i;
        return &b;
      }
      if (b.n == 0 && empty == nullptr) empty = &b;
    }
    if (!claim || empty == nullptr) return nullptr;
    empty->size = size;
    empty->stream = stream;
    hint = static_cast<int>(empty - bins);
    return empty;
  }
};

inline void bump(std::atomic<std::int64_t>& a, std::int64_t v) noexcept {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

// Every pool gets an id that is never reused, so a thread's record of "my cache in pool N"
// cannot be mistaken for a later pool at the same address.
extern std::atomic<std::uint64_t> g_next_pool_id;

/// Whether membarrier(2) with private expedited fences can be used (registered once).
bool membarrier_available();

inline bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

inline std::size_t align_down(std::size_t v, std::size_t a) {
  return v / a * a;
}

}  // namespace modelmem::alloc::caching

namespace modelmem::alloc {

using namespace caching;

struct CachingAllocator::Impl {
  Impl(CachingAllocator* owner, device::DevicePtr dev, CachingOptions opt)
      : owner_(owner),
        device_(std::move(dev)),
        options_(std::move(opt)),
        small_(&pool_memory_),
        large_(&pool_memory_),
        active_(&pool_memory_) {}

  CachingAllocator* owner_;
  device::DevicePtr device_;
  CachingOptions options_;
  std::size_t allowed_ = kNoLimit;  // cap on reserved bytes (per_process_memory_fraction)
  std::size_t page_ = 0;            // expandable: device granularity
  std::size_t map_chunk_ = 0;       // expandable: bytes per map call

  mutable std::mutex mu_;
  std::pmr::unsynchronized_pool_resource pool_memory_;
  FreeSet small_;
  FreeSet large_;
  // The largest block in small_ and large_ and how many have its size, for largest_free() (the
  // statistics' largest_free_block): kept on every pool_insert / pool_erase, so stats() costs
  // no walk of the free sets unless the last block of the largest size left them (stale). A
  // replay calls stats() at every new peak: with a walk, 200,000 streams took minutes.
  mutable std::size_t largest_size_ = 0;
  mutable std::size_t largest_count_ = 0;
  mutable bool largest_stale_ = false;
  std::pmr::unordered_map<std::uintptr_t, Block*> active_;
  std::vector<Block*> pending_;
  std::set<Segment*> fixed_segments_;
  std::map<std::pair<Stream, bool>, Segment*> expandable_;  // (stream, small) -> range
  std::vector<Block*> spare_blocks_;
  Stats stats_;
  std::uint64_t tick_ = 0;
  // cache_decay_ms: (monotonic ns, tick_) sampled when the pool is entered, a quarter decay
  // period apart; a free block whose free_tick is at most the tick of a sample a decay period
  // old has been free that long.
  std::deque<std::pair<std::uint64_t, std::uint64_t>> decay_samples_;
  std::uint64_t next_decay_sample_ns_ = 0;

  // Thread caches (thread_cache_bytes > 0).
  const std::uint64_t id_ = g_next_pool_id.fetch_add(1, std::memory_order_relaxed);
  bool tc_on_ = false;
  bool tc_fence_ = false;           // membarrier protocol (else one atomic exchange per operation)
  std::size_t tc_max_request_ = 0;  // requests up to this size may be cache hits
  bool plain_rounding_ = true;      // no roundup_power2_divisions: round to round_bytes
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  std::vector<std::shared_ptr<ThreadCache>> caches_;
  // Corrections to the pool's own counters, which count parked blocks as allocated: blocks
  // taken back from caches (not counted as freed a second time), and requested bytes of blocks
  // a cache handed out again with another requested size, then freed through the lock.
  std::int64_t steal_b_ = 0, steal_r_ = 0, steal_n_ = 0, fix_r_ = 0;

  // ---------------------------------------------------------------- small helpers

  FreeSet& pool_of(bool small) { return small ? small_ : large_; }

  static PoolKind kind_of(bool small) { return small ? PoolKind::kSmall : PoolKind::kLarge; }

  static void count(CounterSet& c, bool small, std::int64_t delta) noexcept {
    c.move(kind_of(small), delta);
  }

  Block* new_block() {
    if (spare_blocks_.empty()) return new Block;
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    b->reset();
    return b;
  }
  void delete_block(Block* b) {
    b->stream_uses.clear();
    spare_blocks_.push_back(b);
  }

  void pool_insert(Block* b) {
    pool_of(b->segment->small).insert(b);
    if (!largest_stale_ && b->size >= largest_size_) {
      largest_count_ = b->size == largest_size_ ? largest_count_ + 1 : 1;
      largest_size_ = b->size;
    }
    if (b->is_split()) {
      count(stats_.inactive_split_bytes, b->segment->small, static_cast<std::int64_t>(b->size));
      count(stats_.inactive_split, b->segment->small, 1);
    }
  }
  void pool_erase(Block* b) {
    pool_of(b->segment->small).erase(b);
    if (!largest_stale_ && b->size == largest_size_ && --largest_count_ == 0) largest_stale_ = true;
    if (b->is_split()) {
      count(stats_.inactive_split_bytes, b->segment->small, -static_cast<std::int64_t>(b->size));
      count(stats_.inactive_split, b->segment->small, -1);
    }
  }

  static void uncount(CounterSet& c, bool small, std::int64_t n) noexcept {
    c.all.current -= n;
    c[kind_of(small)].current -= n;
  }

  // ---------------------------------------------------------------- thread caches

  [[gnu::always_inline]] ThreadCache* current_cache() const noexcept;
  [[gnu::noinline]] ThreadCache* find_cache() const noexcept;

  // This thread's cache, adopted from an exited thread or made. Under mu_.
  ThreadCache* own_cache_locked() noexcept;
  [[gnu::always_inline]] bool enter(ThreadCache& c) const noexcept;
  static void leave(ThreadCache& c) noexcept;

  // Exclusive access for a thread holding mu_ (waits for the owner to leave an operation).
  void claim(std::span<const std::shared_ptr<ThreadCache>> caches) const;
  void unclaim(std::span<const std::shared_ptr<ThreadCache>> caches) const noexcept;
  std::shared_ptr<ThreadCache> shared_of(ThreadCache* c) const;

  // A cache hit: a block this thread parked for the same (rounded size, stream).
  [[gnu::always_inline]] void* cached_allocate(std::size_t size, Stream stream);

  // Parks a block this thread's cache handed out (or the pool handed to this thread), if the
  // cache has room; false = take the locked path.
  [[gnu::always_inline]] bool cached_deallocate(void* ptr);

  // Under mu_: a block a thread cache knows becomes the pool's alone. False when it is parked,
  // i.e. already freed.
  bool detach(Block* b);

  // Under mu_: every parked block goes back to the pool. Returns the number of blocks.
  std::size_t flush_thread_caches();

  // The pool's counters count parked blocks as allocated; what callers hold is less.
  void apply_thread_caches(Stats& s) const;

  // ---------------------------------------------------------------- sizes

  unsigned divisions_for(std::size_t size) const;
  std::size_t round_size(std::size_t size) const;
  std::size_t segment_size(std::size_t rounded) const;
  bool should_split(const Block* b, std::size_t size) const;

  // ---------------------------------------------------------------- best fit

  Block* find_free(bool small, Stream stream, std::size_t size);
  void split(Block* b, std::size_t size);

  // Merges `b` (free, mapped, in no set) with free neighbours in the pool; returns b.
  Block* coalesce(Block* b);

  // Merges an unmapped block (in no set) with unmapped neighbours and files it.
  void file_unmapped(Block* b);

  // A block comes back for good (freed with no other stream pending, or synchronized).
  void return_block(Block* b, bool count_free = true);

  // ---------------------------------------------------------------- fixed segments

  bool within_allowed(std::size_t bytes) const;
  Block* new_segment(bool small, Stream stream, std::size_t rounded);

  // Returns a fixed segment that is one free block to the device.
  void free_segment(Block* b);

  // ---------------------------------------------------------------- expandable segments

  Segment* expandable_segment(bool small, Stream stream);

  // Maps [addr, addr + bytes) in chunks; on failure unmaps what this call mapped. Returns false
  // when the device is out of memory; other device errors propagate after the rollback.
  bool map_range(Segment* s, std::uintptr_t addr, std::size_t bytes);
  void unmap_range(Segment* s, std::uintptr_t addr, std::size_t bytes);

  // Maps pages at the lowest address of the (stream, pool) range where `size` fits, counting
  // free mapped blocks on either side of an unmapped run; returns the free block (in no set).
  Block* expand(bool small, Stream stream, std::size_t size);

  // Unmaps the whole pages inside a free mapped block of an expandable segment. Returns bytes.
  std::size_t unmap_free_block(Block* b);

  // Growth recycles instead of adding: before `bytes` are mapped, whole free pages cached
  // elsewhere (any expandable range, oldest first) are unmapped, up to `bytes`. `keep1` and
  // `keep2` are the free neighbours the new mapping is about to merge with.
  void recycle_pages(std::size_t bytes, const Block* keep1, const Block* keep2);

  // ---------------------------------------------------------------- releasing the cache

  bool releasable(const Block* b) const;
  std::size_t release_block(Block* b);
  std::vector<Block*> releasable_blocks();
  // Gives back whole free segments, the longest free first, while `more()` holds (defined and
  // used in pool.cpp).
  template <class More>
  void release_oldest_while(More more);
  std::size_t release_all_cached();

  // garbage_collection_threshold: once reserved memory passes the threshold, give back cached
  // memory, oldest first, until it is under again; this trades a few device calls for not
  // hitting the full release-and-retry later.
  void garbage_collect();
  // cache_decay_ms: gives back the cached memory free for a decay period (under the lock).
  void decay();
  void decay_now() {
    std::lock_guard lock(mu_);
    decay();
  }
  Block* get_new(bool small, Stream stream, std::size_t rounded);

  // ---------------------------------------------------------------- numbers

  std::size_t largest_free() const;
  [[noreturn]] void throw_oom(std::size_t size, Stream stream);

  // ---------------------------------------------------------------- the operations

  // First rung of the out-of-memory ladder: blocks parked in thread caches go back to the pool,
  // and with max_split_size, cached oversize blocks (never split, so never reused for smaller
  // requests) are freed: the smallest one that covers the request, else the largest ones until
  // their total does. Returns true when it freed or recovered anything.
  bool release_parked_and_oversize(bool pool, std::size_t rounded);
  void* allocate(std::size_t size, Stream stream);
  [[gnu::noinline]] void* allocate_locked(std::size_t size, Stream stream);
  [[noreturn]] static void not_live(void* ptr, const char* what);

  // The live block at `ptr` (settled with any thread cache that knows it), or InvalidInput.
  Block* lookup(void* ptr, const char* what);
  void deallocate(void* ptr);
  [[gnu::noinline]] void deallocate_locked(void* ptr);
  void record_stream(void* ptr, Stream stream);
  void synchronize();
  void trim();
  Stats stats() const;
  void reset_peak();
  void release_everything() noexcept;
};

}  // namespace modelmem::alloc

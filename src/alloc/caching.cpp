// The caching pool. The policy follows PyTorch's CUDA caching allocator; the structure is ours:
// segments are split into blocks kept in a doubly linked list per segment, free blocks sit in
// one ordered set per pool keyed by (stream, size, address) so best fit is one lower_bound.
//
// Invariants (checked by the tests, relied on everywhere below):
//  - The blocks of a segment tile it exactly, in address order, with no gap.
//  - A free block is in exactly one place: its pool's free set when mapped and not pending, its
//    segment's `unmapped` set when not mapped; pending blocks (freed, waiting on other streams)
//    and allocated blocks are in no set. Allocated blocks are in `active_`.
//  - No two adjacent blocks are both free-in-pool (they are merged), nor both unmapped.
//  - Expandable segments only: unmapped blocks start and end on page boundaries, so a page is
//    mapped exactly when some mapped block overlaps it.
#include "modelmem/alloc/caching_allocator.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory_resource>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modelmem/core/error.hpp"

#if defined(__linux__) && __has_include(<linux/membarrier.h>)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MODELMEM_HAVE_MEMBARRIER 1
#endif

namespace modelmem::alloc {
namespace {

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

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
constexpr int kFirstFitScan = 64;

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

constexpr int kBins = 16;
constexpr int kSlotsPerBin = 8;
constexpr int kTableSize = 256;  // direct-mapped: pointer -> live block known to this cache

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

void bump(std::atomic<std::int64_t>& a, std::int64_t v) noexcept {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

// Every pool gets an id that is never reused, so a thread's record of "my cache in pool N"
// cannot be mistaken for a later pool at the same address.
std::atomic<std::uint64_t> g_next_pool_id{1};

struct CacheRef {
  std::uint64_t pool_id;
  std::shared_ptr<ThreadCache> cache;
  std::shared_ptr<std::atomic<bool>> pool_alive;
};

thread_local std::uint64_t t_last_pool = 0;
thread_local ThreadCache* t_last_cache = nullptr;
thread_local bool t_exiting = false;

// The thread's caches, one per pool it used. At thread exit each is marked orphaned (a later
// thread adopts it, so thread churn does not grow the pool's list).
struct ThreadCaches {
  std::vector<CacheRef> refs;
  ~ThreadCaches();
};
thread_local ThreadCaches t_caches;

ThreadCaches::~ThreadCaches() {
  t_exiting = true;
  t_last_pool = 0;
  t_last_cache = nullptr;
  for (CacheRef& r : refs) r.cache->orphaned.store(true, std::memory_order_release);
}

#ifdef MODELMEM_HAVE_MEMBARRIER
long membarrier_call(int cmd) {
  return syscall(SYS_membarrier, cmd, 0, 0);
}
bool membarrier_available() {
  static const bool ok = [] {
    const long q = membarrier_call(MEMBARRIER_CMD_QUERY);
    if (q < 0 || (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return ok;
}
// A full memory barrier on every running thread of the process.
void fence_all_threads() {
  if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // A forked child has to register again.
  if (membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
      membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
    return;
  if (membarrier_call(MEMBARRIER_CMD_GLOBAL) == 0) return;
  std::fputs("modelmem: membarrier failed after it was available; cannot continue safely\n",
             stderr);
  std::abort();
}
#else
bool membarrier_available() {
  return false;
}
void fence_all_threads() {}
#endif

bool is_pow2(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

std::size_t align_down(std::size_t v, std::size_t a) {
  return v / a * a;
}

}  // namespace

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
  std::pmr::unordered_map<std::uintptr_t, Block*> active_;
  std::vector<Block*> pending_;
  std::set<Segment*> fixed_segments_;
  std::map<std::pair<Stream, bool>, Segment*> expandable_;  // (stream, small) -> range
  std::vector<Block*> spare_blocks_;
  Stats stats_;
  std::uint64_t tick_ = 0;

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
    if (b->is_split()) {
      count(stats_.inactive_split_bytes, b->segment->small, static_cast<std::int64_t>(b->size));
      count(stats_.inactive_split, b->segment->small, 1);
    }
  }
  void pool_erase(Block* b) {
    pool_of(b->segment->small).erase(b);
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

  [[gnu::always_inline]] ThreadCache* current_cache() const noexcept {
    if (t_last_pool == id_) [[likely]]
      return t_last_cache;
    return find_cache();
  }
  [[gnu::noinline]] ThreadCache* find_cache() const noexcept {
    if (t_exiting) return nullptr;
    for (const CacheRef& r : t_caches.refs)
      if (r.pool_id == id_) {
        t_last_pool = id_;
        t_last_cache = r.cache.get();
        return t_last_cache;
      }
    return nullptr;
  }

  // This thread's cache, adopted from an exited thread or made. Under mu_.
  ThreadCache* own_cache_locked() noexcept {
    if (ThreadCache* c = current_cache()) return c;
    if (t_exiting) return nullptr;
    try {
      std::shared_ptr<ThreadCache> cache;
      for (auto& c : caches_)
        if (c->orphaned.load(std::memory_order_acquire)) {
          cache = c;
          break;
        }
      if (!cache) {
        cache = std::make_shared<ThreadCache>();
        caches_.push_back(cache);
      }
      auto& refs = t_caches.refs;
      std::erase_if(
          refs, [](const CacheRef& r) { return !r.pool_alive->load(std::memory_order_acquire); });
      refs.push_back(CacheRef{id_, cache, alive_});
      cache->orphaned.store(false, std::memory_order_relaxed);
      t_last_pool = id_;
      t_last_cache = cache.get();
      return cache.get();
    } catch (const std::bad_alloc&) {
      return nullptr;  // no cache for this thread: everything goes through the lock
    }
  }

  [[gnu::always_inline]] bool enter(ThreadCache& c) const noexcept {
    if (tc_fence_) {
      c.busy.store(1, std::memory_order_relaxed);
      // The claimer's membarrier orders this store before the load on the CPU.
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (c.claimed.load(std::memory_order_acquire) == 0) return true;
      c.busy.store(0, std::memory_order_release);
      return false;
    }
    int expected = 0;
    return c.busy.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }
  static void leave(ThreadCache& c) noexcept { c.busy.store(0, std::memory_order_release); }

  // Exclusive access for a thread holding mu_ (waits for the owner to leave an operation).
  void claim(std::span<const std::shared_ptr<ThreadCache>> caches) const {
    if (caches.empty()) return;
    if (tc_fence_) {
      for (const auto& c : caches) c->claimed.store(1, std::memory_order_relaxed);
      fence_all_threads();
      for (const auto& c : caches)
        while (c->busy.load(std::memory_order_acquire) != 0) std::this_thread::yield();
      return;
    }
    for (const auto& c : caches) {
      int expected = 0;
      while (!c->busy.compare_exchange_weak(expected, 2, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
        expected = 0;
        std::this_thread::yield();
      }
    }
  }
  void unclaim(std::span<const std::shared_ptr<ThreadCache>> caches) const noexcept {
    for (const auto& c : caches) {
      if (tc_fence_)
        c->claimed.store(0, std::memory_order_release);
      else
        c->busy.store(0, std::memory_order_release);
    }
  }
  std::shared_ptr<ThreadCache> shared_of(ThreadCache* c) const {
    for (const auto& p : caches_)
      if (p.get() == c) return p;
    return nullptr;
  }

  // A cache hit: a block this thread parked for the same (rounded size, stream).
  [[gnu::always_inline]] void* cached_allocate(std::size_t size, Stream stream) {
    if (size - 1 >= tc_max_request_) return nullptr;  // also size 0
    ThreadCache* c = current_cache();
    if (c == nullptr) return nullptr;
    const std::size_t rounded =
        plain_rounding_ ? (size + options_.round_bytes - 1) & ~(options_.round_bytes - 1)
                        : round_size(size);
    if (!enter(*c)) return nullptr;
    std::uintptr_t addr = 0;
    ThreadCache::Bin* bin = c->bin(rounded, stream, false);
    if (bin != nullptr && bin->n > 0) {
      Block* b = bin->slot[--bin->n];
      bin->slot[bin->n] = nullptr;
      c->parked_bytes -= b->size;
      b->requested = size;
      b->tc_state.store(kTcLive, std::memory_order_relaxed);
      c->remember(b);
      addr = b->addr;
      bump(c->hits_b, static_cast<std::int64_t>(b->size));
      bump(c->hits_r, static_cast<std::int64_t>(size));
      bump(c->hits_n, 1);
    }
    leave(*c);
    if (addr == 0) return nullptr;
    owner_->emit(EventKind::kAlloc, addr, size, stream);
    return reinterpret_cast<void*>(addr);
  }

  // Parks a block this thread's cache handed out (or the pool handed to this thread), if the
  // cache has room; false = take the locked path.
  [[gnu::always_inline]] bool cached_deallocate(void* ptr) {
    ThreadCache* c = current_cache();
    if (c == nullptr) return false;
    if (!enter(*c)) return false;
    const auto p = reinterpret_cast<std::uintptr_t>(ptr);
    ThreadCache::Entry& e = c->table[ThreadCache::slot_of(p)];
    std::size_t bytes = 0;
    Stream stream = 0;
    if (e.ptr == p) {
      Block* b = e.block;
      ThreadCache::Bin* bin = c->parked_bytes + b->size <= options_.thread_cache_bytes
                                  ? c->bin(b->size, b->stream, true)
                                  : nullptr;
      if (bin != nullptr && bin->n < kSlotsPerBin) {
        e = ThreadCache::Entry{};
        b->tc_state.store(kTcParked, std::memory_order_relaxed);
        bin->slot[bin->n++] = b;
        c->parked_bytes += b->size;
        bytes = b->size;
        stream = b->stream;
        bump(c->parks_b, static_cast<std::int64_t>(b->size));
        bump(c->parks_r, static_cast<std::int64_t>(b->requested));
        bump(c->parks_n, 1);
      }
    }
    leave(*c);
    if (bytes == 0) return false;
    owner_->emit(EventKind::kFree, p, bytes, stream);
    return true;
  }

  // Under mu_: a block a thread cache knows becomes the pool's alone. False when it is parked,
  // i.e. already freed.
  bool detach(Block* b) {
    if (b->tc_state.load(std::memory_order_relaxed) == kTcNone) return true;
    ThreadCache* o = b->tc_owner;
    std::shared_ptr<ThreadCache> foreign;
    if (o != current_cache()) foreign = shared_of(o);
    if (foreign) claim({&foreign, 1});
    const bool live = b->tc_state.load(std::memory_order_relaxed) == kTcLive;
    if (live) {
      o->forget(b->addr);
      b->tc_state.store(kTcNone, std::memory_order_relaxed);
      b->tc_owner = nullptr;
    }
    if (foreign) unclaim({&foreign, 1});
    return live;
  }

  // Under mu_: every parked block goes back to the pool. Returns the number of blocks.
  std::size_t flush_thread_caches() {
    if (caches_.empty()) return 0;
    claim(caches_);
    std::size_t n = 0;
    for (const auto& c : caches_) {
      for (ThreadCache::Bin& bin : c->bins) {
        for (int i = 0; i < bin.n; ++i) {
          Block* b = bin.slot[i];
          bin.slot[i] = nullptr;
          b->tc_state.store(kTcNone, std::memory_order_relaxed);
          b->tc_owner = nullptr;
          const bool small = b->small_request;
          const auto bytes = static_cast<std::int64_t>(b->size);
          const auto req = static_cast<std::int64_t>(b->requested_counted);
          // The caller's free was counted when the block was parked.
          uncount(stats_.allocated_bytes, small, bytes);
          uncount(stats_.requested_bytes, small, req);
          uncount(stats_.allocation, small, 1);
          uncount(stats_.active_bytes, small, bytes);
          uncount(stats_.active, small, 1);
          steal_b_ += bytes;
          steal_r_ += req;
          ++steal_n_;
          active_.erase(b->addr);
          return_block(b, false);
          ++n;
        }
        bin.n = 0;
      }
      c->parked_bytes = 0;
    }
    unclaim(caches_);
    return n;
  }

  // The pool's counters count parked blocks as allocated; what callers hold is less.
  void apply_thread_caches(Stats& s) const {
    std::int64_t pb = 0, pr = 0, pn = 0, hb = 0, hr = 0, hn = 0;
    for (const auto& c : caches_) {
      pb += c->parks_b.load(std::memory_order_relaxed);
      pr += c->parks_r.load(std::memory_order_relaxed);
      pn += c->parks_n.load(std::memory_order_relaxed);
      hb += c->hits_b.load(std::memory_order_relaxed);
      hr += c->hits_r.load(std::memory_order_relaxed);
      hn += c->hits_n.load(std::memory_order_relaxed);
    }
    auto adjust = [](CounterSet& set, std::int64_t parks, std::int64_t hits, std::int64_t fix,
                     std::int64_t steal) {
      for (Counter* k : {&set.all, &set.small}) {
        k->current += hits - parks + fix + steal;
        k->allocated += hits;
        k->freed += parks - fix;
        k->peak = std::max(k->peak, k->current);
      }
    };
    adjust(s.allocated_bytes, pb, hb, 0, steal_b_);
    adjust(s.active_bytes, pb, hb, 0, steal_b_);
    adjust(s.requested_bytes, pr, hr, fix_r_, steal_r_);
    adjust(s.allocation, pn, hn, 0, steal_n_);
    adjust(s.active, pn, hn, 0, steal_n_);
  }

  // ---------------------------------------------------------------- sizes

  unsigned divisions_for(std::size_t size) const {
    const auto& table = options_.roundup_power2_divisions;
    if (table.empty()) return 0;
    const std::size_t edge = std::bit_floor(size);
    auto it = table.find(edge);
    if (it == table.end()) it = table.find(0);
    return it == table.end() ? 0 : it->second;
  }

  std::size_t round_size(std::size_t size) const {
    const std::size_t unit = options_.round_bytes;
    if (size <= unit) return unit;
    const unsigned div = divisions_for(size);
    if (div > 1 && size / div > unit) {
      // Round up to the next of `div` equal steps between two powers of two, so that sizes
      // that vary a little (sequence lengths, batch sizes) land on few distinct block sizes.
      if (is_pow2(size)) return size;
      const std::size_t step = std::max<std::size_t>(std::bit_floor(size) / div, unit);
      return checked_align_up(checked_align_up(size, step, "allocation size"), unit,
                              "allocation size");
    }
    return checked_align_up(size, unit, "allocation size");
  }

  std::size_t segment_size(std::size_t rounded) const {
    if (rounded <= options_.small_size) return options_.small_segment;
    if (rounded < options_.min_large_alloc) return options_.large_segment;
    return checked_align_up(rounded, options_.round_large, "segment size");
  }

  bool should_split(const Block* b, std::size_t size) const {
    const std::size_t remaining = b->size - size;
    if (b->segment->small || b->segment->expandable) return remaining >= options_.round_bytes;
    return size < options_.max_split_size && remaining > options_.small_size;
  }

  // ---------------------------------------------------------------- best fit

  Block* find_free(bool small, Stream stream, std::size_t size) {
    FreeSet& pool = pool_of(small);
    Block key;
    key.stream = stream;
    key.size = size;
    key.addr = 0;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    if (b->segment->expandable) {
      // Lowest address among the blocks that fit (bounded scan): keeps the live set packed at
      // the bottom of the range, so whole pages at the top come free for recycling.
      int budget = kFirstFitScan;
      for (auto j = std::next(it); j != pool.end() && (*j)->stream == stream && budget > 0;
           ++j, --budget)
        if ((*j)->addr < b->addr) b = *j;
    }
    if (options_.max_split_size != kNoLimit && !b->segment->expandable) {
      // Never hand an oversize block (one that is not split) to a small request, and do not
      // waste a much larger oversize block on an oversize request.
      if (size < options_.max_split_size && b->size >= options_.max_split_size) return nullptr;
      if (size >= options_.max_split_size && b->size >= size + options_.large_segment)
        return nullptr;
    }
    pool_erase(b);
    return b;
  }

  void split(Block* b, std::size_t size) {
    if (!should_split(b, size)) return;
    Block* r = new_block();
    r->addr = b->addr + size;
    r->size = b->size - size;
    r->stream = b->stream;
    r->segment = b->segment;
    r->mapped = true;
    r->free_tick = b->free_tick;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool_insert(r);
  }

  // Merges `b` (free, mapped, in no set) with free neighbours in the pool; returns b.
  Block* coalesce(Block* b) {
    if (Block* p = b->prev; p != nullptr && p->in_pool()) {
      pool_erase(p);
      b->addr = p->addr;
      b->size += p->size;
      b->prev = p->prev;
      if (p->prev != nullptr) p->prev->next = b;
      if (b->segment->head == p) b->segment->head = b;
      delete_block(p);
    }
    if (Block* n = b->next; n != nullptr && n->in_pool()) {
      pool_erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      delete_block(n);
    }
    return b;
  }

  // Merges an unmapped block (in no set) with unmapped neighbours and files it.
  void file_unmapped(Block* b) {
    Segment* s = b->segment;
    if (Block* p = b->prev; p != nullptr && !p->mapped) {
      s->unmapped.erase(p);
      b->addr = p->addr;
      b->size += p->size;
      b->prev = p->prev;
      if (p->prev != nullptr) p->prev->next = b;
      if (s->head == p) s->head = b;
      delete_block(p);
    }
    if (Block* n = b->next; n != nullptr && !n->mapped) {
      s->unmapped.erase(n);
      b->size += n->size;
      b->next = n->next;
      if (n->next != nullptr) n->next->prev = b;
      delete_block(n);
    }
    s->unmapped.insert(b);
  }

  // A block comes back for good (freed with no other stream pending, or synchronized).
  void return_block(Block* b, bool count_free = true) {
    const bool small = b->small_request;
    if (count_free) stats_.count_active(kind_of(small), b->size, false);
    b->allocated = false;
    b->pending = false;
    b->stream_uses.clear();
    b->free_tick = ++tick_;
    pool_insert(coalesce(b));
  }

  // ---------------------------------------------------------------- fixed segments

  bool within_allowed(std::size_t bytes) const {
    const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all.current);
    return allowed_ == kNoLimit || (bytes <= allowed_ && reserved <= allowed_ - bytes);
  }

  Block* new_segment(bool small, Stream stream, std::size_t rounded) {
    const std::size_t bytes = std::max(segment_size(rounded), rounded);
    if (!within_allowed(bytes)) return nullptr;
    void* p;
    try {
      p = device_->allocate(bytes);
    } catch (const OutOfMemory&) {
      return nullptr;
    }
    auto* s = new Segment(&pool_memory_);
    s->base = reinterpret_cast<std::uintptr_t>(p);
    s->size = bytes;
    s->small = small;
    s->stream = stream;
    fixed_segments_.insert(s);
    Block* b = new_block();
    b->addr = s->base;
    b->size = bytes;
    b->stream = stream;
    b->segment = s;
    s->head = b;
    stats_.count_segment(kind_of(small), bytes, true);
    owner_->emit(EventKind::kSegmentAlloc, s->base, bytes, stream);
    return b;
  }

  // Returns a fixed segment that is one free block to the device.
  void free_segment(Block* b) {
    Segment* s = b->segment;
    pool_erase(b);
    device_->deallocate(reinterpret_cast<void*>(s->base), s->size);
    stats_.count_segment(kind_of(s->small), s->size, false);
    owner_->emit(EventKind::kSegmentFree, s->base, s->size, s->stream);
    fixed_segments_.erase(s);
    delete_block(b);
    delete s;
  }

  // ---------------------------------------------------------------- expandable segments

  Segment* expandable_segment(bool small, Stream stream) {
    auto key = std::make_pair(stream, small);
    if (auto it = expandable_.find(key); it != expandable_.end()) return it->second;
    std::size_t bytes = options_.expandable_reserve;
    if (bytes == 0) bytes = device_->memory_info().total;
    bytes = checked_align_up(std::max(bytes, page_), page_, "expandable_reserve");
    void* p;
    try {
      p = device_->reserve(bytes);
    } catch (const OutOfMemory&) {
      return nullptr;
    }
    auto* s = new Segment(&pool_memory_);
    s->base = reinterpret_cast<std::uintptr_t>(p);
    s->size = bytes;
    s->expandable = true;
    s->small = small;
    s->stream = stream;
    Block* b = new_block();
    b->addr = s->base;
    b->size = bytes;
    b->stream = stream;
    b->segment = s;
    b->mapped = false;
    s->head = b;
    s->unmapped.insert(b);
    expandable_.emplace(key, s);
    count(stats_.segment, small, 1);
    return s;
  }

  // Maps [addr, addr + bytes) in chunks; on failure unmaps what this call mapped. Returns false
  // when the device is out of memory; other device errors propagate after the rollback.
  bool map_range(Segment* s, std::uintptr_t addr, std::size_t bytes) {
    if (!within_allowed(bytes)) return false;
    std::size_t done = 0;
    std::int64_t calls = 0;
    try {
      while (done < bytes) {
        const std::size_t n = std::min(map_chunk_, bytes - done);
        device_->map(reinterpret_cast<void*>(addr + done), n);
        done += n;
        ++calls;
      }
    } catch (...) {
      for (std::size_t off = 0; off < done; off += map_chunk_)
        device_->unmap(reinterpret_cast<void*>(addr + off), std::min(map_chunk_, done - off));
      try {
        throw;
      } catch (const OutOfMemory&) {
        return false;
      }
    }
    s->mapped += bytes;
    count(stats_.reserved_bytes, s->small, static_cast<std::int64_t>(bytes));
    stats_.num_device_alloc += calls;
    owner_->emit(EventKind::kMap, addr, bytes, s->stream);
    return true;
  }

  void unmap_range(Segment* s, std::uintptr_t addr, std::size_t bytes) {
    device_->unmap(reinterpret_cast<void*>(addr), bytes);
    s->mapped -= bytes;
    count(stats_.reserved_bytes, s->small, -static_cast<std::int64_t>(bytes));
    ++stats_.num_device_free;
    owner_->emit(EventKind::kUnmap, addr, bytes, s->stream);
  }

  // Maps pages at the lowest address of the (stream, pool) range where `size` fits, counting
  // free mapped blocks on either side of an unmapped run; returns the free block (in no set).
  Block* expand(bool small, Stream stream, std::size_t size) {
    Segment* s = expandable_segment(small, stream);
    if (s == nullptr) return nullptr;
    for (Block* u : s->unmapped) {
      Block* p = u->prev != nullptr && u->prev->in_pool() ? u->prev : nullptr;
      Block* n = u->next != nullptr && u->next->in_pool() ? u->next : nullptr;
      const std::size_t before = p != nullptr ? p->size : 0;
      std::size_t map_bytes;
      if (before + u->size >= size) {
        map_bytes = checked_align_up(size - std::min(size, before), page_, "expandable map");
        if (map_bytes == 0) continue;  // p alone fits: best fit would have taken it
      } else if (n != nullptr && before + u->size + n->size >= size) {
        map_bytes = u->size;
      } else {
        continue;
      }
      if (options_.expandable_recycle) recycle_pages(map_bytes, p, n);
      if (!map_range(s, u->addr, map_bytes)) return nullptr;
      s->unmapped.erase(u);
      if (map_bytes < u->size) {
        Block* rest = new_block();
        rest->addr = u->addr + map_bytes;
        rest->size = u->size - map_bytes;
        rest->stream = u->stream;
        rest->segment = s;
        rest->mapped = false;
        rest->prev = u;
        rest->next = u->next;
        if (u->next != nullptr) u->next->prev = rest;
        u->next = rest;
        u->size = map_bytes;
        s->unmapped.insert(rest);
      }
      u->mapped = true;
      u->free_tick = ++tick_;
      return coalesce(u);
    }
    return nullptr;
  }

  // Unmaps the whole pages inside a free mapped block of an expandable segment. Returns bytes.
  std::size_t unmap_free_block(Block* b) {
    Segment* s = b->segment;
    const std::uintptr_t lo = checked_align_up(b->addr, page_, "unmap");
    const std::uintptr_t end = b->addr + b->size;
    const std::uintptr_t hi = align_down(end, page_);
    if (hi <= lo) return 0;
    pool_erase(b);
    unmap_range(s, lo, hi - lo);
    // Split into [addr, lo) mapped, [lo, hi) unmapped, [hi, end) mapped.
    Block* mid = b;
    if (lo > b->addr) {
      Block* head = new_block();
      head->addr = b->addr;
      head->size = lo - b->addr;
      head->stream = b->stream;
      head->segment = s;
      head->free_tick = b->free_tick;
      head->prev = b->prev;
      head->next = b;
      if (b->prev != nullptr) b->prev->next = head;
      if (s->head == b) s->head = head;
      b->prev = head;
      b->addr = lo;
      b->size -= head->size;
      pool_insert(head);
    }
    if (hi < end) {
      Block* tail = new_block();
      tail->addr = hi;
      tail->size = end - hi;
      tail->stream = b->stream;
      tail->segment = s;
      tail->free_tick = b->free_tick;
      tail->prev = b;
      tail->next = b->next;
      if (b->next != nullptr) b->next->prev = tail;
      b->next = tail;
      b->size -= tail->size;
      pool_insert(tail);
    }
    mid->mapped = false;
    file_unmapped(mid);
    return hi - lo;
  }

  // Growth recycles instead of adding: before `bytes` are mapped, whole free pages cached
  // elsewhere (any expandable range, oldest first) are unmapped, up to `bytes`. `keep1` and
  // `keep2` are the free neighbours the new mapping is about to merge with.
  void recycle_pages(std::size_t bytes, const Block* keep1, const Block* keep2) {
    std::vector<Block*> blocks;
    for (FreeSet* pool : {&small_, &large_})
      for (Block* b : *pool)
        if (b != keep1 && b != keep2 && b->segment->expandable && releasable(b))
          blocks.push_back(b);
    if (blocks.empty()) return;
    std::sort(blocks.begin(), blocks.end(),
              [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
    std::size_t freed = 0;
    for (Block* b : blocks) {
      if (freed >= bytes) break;
      freed += unmap_free_block(b);
    }
  }

  // ---------------------------------------------------------------- releasing the cache

  bool releasable(const Block* b) const {
    if (b->segment->expandable)
      return align_down(b->addr + b->size, page_) > checked_align_up(b->addr, page_, "release");
    return !b->is_split();
  }

  std::size_t release_block(Block* b) {
    if (b->segment->expandable) return unmap_free_block(b);
    const std::size_t bytes = b->segment->size;
    free_segment(b);
    return bytes;
  }

  std::vector<Block*> releasable_blocks() {
    std::vector<Block*> out;
    for (FreeSet* pool : {&small_, &large_})
      for (Block* b : *pool)
        if (releasable(b)) out.push_back(b);
    return out;
  }

  std::size_t release_all_cached() {
    std::size_t freed = 0;
    for (Block* b : releasable_blocks()) freed += release_block(b);
    return freed;
  }

  // garbage_collection_threshold: once reserved memory passes the threshold, give back cached
  // memory, oldest first, until it is under again; this trades a few device calls for not
  // hitting the full release-and-retry later.
  void garbage_collect() {
    if (options_.garbage_collection_threshold <= 0.0 || allowed_ == kNoLimit) return;
    const auto limit = static_cast<std::size_t>(options_.garbage_collection_threshold *
                                                static_cast<double>(allowed_));
    auto reserved = [&] { return static_cast<std::size_t>(stats_.reserved_bytes.all.current); };
    if (reserved() <= limit) return;
    std::vector<Block*> blocks = releasable_blocks();
    std::sort(blocks.begin(), blocks.end(),
              [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
    for (Block* b : blocks) {
      if (reserved() <= limit) break;
      release_block(b);
    }
  }

  Block* get_new(bool small, Stream stream, std::size_t rounded) {
    return options_.expandable_segments ? expand(small, stream, rounded)
                                        : new_segment(small, stream, rounded);
  }

  // ---------------------------------------------------------------- numbers

  std::size_t largest_free() const {
    std::size_t best = 0;
    for (const FreeSet* pool : {&small_, &large_})
      for (const Block* b : *pool) best = std::max(best, b->size);
    return best;
  }

  [[noreturn]] void throw_oom(std::size_t size, Stream stream) {
    ++stats_.num_ooms;
    owner_->emit(EventKind::kOom, 0, size, stream);
    OomInfo info;
    info.requested = size;
    try {
      info.device_free = device_->memory_info().free;
    } catch (...) {
    }
    const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all.current);
    std::string note;
    if (allowed_ != kNoLimit) {
      info.device_free = std::min(info.device_free, allowed_ > reserved ? allowed_ - reserved : 0);
      note = " (per_process_memory_fraction caps reserved at " + format_bytes(allowed_) + ")";
    }
    info.reserved = reserved;
    info.allocated = static_cast<std::size_t>(stats_.allocated_bytes.all.current);
    info.largest_free_block = largest_free();
    info.where = "caching pool on " + device_->name();
    throw OutOfMemory(info, modelmem::describe(info) + note);
  }

  // ---------------------------------------------------------------- the operations

  // First rung of the out-of-memory ladder: blocks parked in thread caches go back to the pool,
  // and with max_split_size, cached oversize blocks (never split, so never reused for smaller
  // requests) are freed: the smallest one that covers the request, else the largest ones until
  // their total does. Returns true when it freed or recovered anything.
  bool release_parked_and_oversize(bool pool, std::size_t rounded) {
    bool any = flush_thread_caches() > 0;
    if (options_.max_split_size == kNoLimit || options_.expandable_segments) return any;
    std::vector<Block*> oversize;
    for (Block* b : pool_of(pool))
      if (b->size >= options_.max_split_size && releasable(b)) oversize.push_back(b);
    std::sort(oversize.begin(), oversize.end(),
              [](const Block* a, const Block* b) { return a->size < b->size; });
    auto fit = std::find_if(oversize.begin(), oversize.end(),
                            [&](const Block* b) { return b->size >= rounded; });
    if (fit != oversize.end()) {
      release_block(*fit);
      return true;
    }
    std::size_t freed = 0;
    for (auto it = oversize.rbegin(); it != oversize.rend() && freed < rounded; ++it) {
      freed += release_block(*it);
      any = true;
    }
    return any;
  }

  void* allocate(std::size_t size, Stream stream) {
    if (tc_on_)
      if (void* p = cached_allocate(size, stream)) return p;
    return allocate_locked(size, stream);
  }

  [[gnu::noinline]] void* allocate_locked(std::size_t size, Stream stream) {
    if (size == 0) throw InvalidInput("allocate: size 0");
    std::lock_guard lock(mu_);
    const std::size_t rounded = round_size(size);
    const bool small = rounded <= options_.small_size;
    // With one expandable range per stream, both size classes are served from the large pool's
    // range (and free lists); their allocation statistics still say which class they are.
    const bool pool = small && (!options_.expandable_segments || options_.expandable_split_pools);
    Block* b = find_free(pool, stream, rounded);
    if (b == nullptr) {
      garbage_collect();
      b = get_new(pool, stream, rounded);
      if (b == nullptr && release_parked_and_oversize(pool, rounded)) {
        // The out-of-memory ladder, first rung (see above), then try again.
        ++stats_.num_alloc_retries;
        b = find_free(pool, stream, rounded);
        if (b == nullptr) b = get_new(pool, stream, rounded);
      }
      if (b == nullptr) {
        // Second rung: give back everything cached, then try once more.
        release_all_cached();
        ++stats_.num_alloc_retries;
        b = get_new(pool, stream, rounded);
        if (b == nullptr) throw_oom(size, stream);
      }
    }
    split(b, rounded);
    b->allocated = true;
    b->small_request = small;
    b->requested = size;
    b->requested_counted = size;
    active_.emplace(b->addr, b);
    if (tc_on_ && small && b->size <= options_.thread_cache_bytes) {
      // This thread may free it later without the lock.
      if (ThreadCache* c = own_cache_locked()) {
        b->tc_owner = c;
        b->tc_state.store(kTcLive, std::memory_order_relaxed);
        c->remember(b);
      }
    }
    stats_.count_block(kind_of(small), b->size, size, true);
    owner_->emit(EventKind::kAlloc, b->addr, size, stream);
    return reinterpret_cast<void*>(b->addr);
  }

  [[noreturn]] static void not_live(void* ptr, const char* what) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%s: pointer %p was not allocated by this caching pool or was already freed",
                  what, ptr);
    throw InvalidInput(buf);
  }

  // The live block at `ptr` (settled with any thread cache that knows it), or InvalidInput.
  Block* lookup(void* ptr, const char* what) {
    auto it = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == active_.end() || !detach(it->second)) not_live(ptr, what);
    return it->second;
  }

  void deallocate(void* ptr) {
    if (tc_on_ && cached_deallocate(ptr)) return;
    deallocate_locked(ptr);
  }

  [[gnu::noinline]] void deallocate_locked(void* ptr) {
    std::lock_guard lock(mu_);
    Block* b = lookup(ptr, "deallocate");
    active_.erase(b->addr);
    const bool small = b->small_request;
    stats_.count_handed_out(kind_of(small), b->size, b->requested_counted, false);
    fix_r_ +=
        static_cast<std::int64_t>(b->requested_counted) - static_cast<std::int64_t>(b->requested);
    owner_->emit(EventKind::kFree, b->addr, b->size, b->stream);
    if (!b->stream_uses.empty()) {
      b->allocated = false;
      b->pending = true;
      pending_.push_back(b);
      return;
    }
    return_block(b);
  }

  void record_stream(void* ptr, Stream stream) {
    std::lock_guard lock(mu_);
    Block* b = lookup(ptr, "record_stream");
    if (stream == b->stream) return;
    if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
      b->stream_uses.push_back(stream);
  }

  void synchronize() {
    std::lock_guard lock(mu_);
    std::vector<Block*> blocks;
    blocks.swap(pending_);
    for (Block* b : blocks) return_block(b);
  }

  void trim() {
    std::lock_guard lock(mu_);
    flush_thread_caches();
    release_all_cached();
  }

  Stats stats() const {
    std::lock_guard lock(mu_);
    Stats s = stats_;
    if (tc_on_) apply_thread_caches(s);
    s.largest_free_block = largest_free();
    return s;
  }  // CachingAllocator::stats adds the warnings

  void reset_peak() {
    std::lock_guard lock(mu_);
    // Parked blocks count as allocated in the peaks: start from none.
    flush_thread_caches();
    stats_.reset_peaks();
  }

  void release_everything() noexcept {
    // Threads keep their caches until they exit, but never use them again: the id is gone.
    alive_->store(false, std::memory_order_release);
    caches_.clear();
    // Blocks still allocated are given back too: the pool owns the device memory.
    for (Segment* s : fixed_segments_) {
      device_->deallocate(reinterpret_cast<void*>(s->base), s->size);
      for (Block* b = s->head; b != nullptr;) {
        Block* n = b->next;
        delete b;
        b = n;
      }
      delete s;
    }
    fixed_segments_.clear();
    for (auto& [key, s] : expandable_) {
      // Mapped runs lie between unmapped blocks, which are page-aligned: unmap run by run.
      std::uintptr_t run = 0;
      bool in_run = false;
      for (Block* b = s->head; b != nullptr;) {
        if (b->mapped && !in_run) {
          run = b->addr;
          in_run = true;
        }
        if (!b->mapped && in_run) {
          device_->unmap(reinterpret_cast<void*>(run), b->addr - run);
          in_run = false;
        }
        Block* n = b->next;
        delete b;
        b = n;
      }
      if (in_run) device_->unmap(reinterpret_cast<void*>(run), s->base + s->size - run);
      device_->release(reinterpret_cast<void*>(s->base), s->size);
      delete s;
    }
    expandable_.clear();
    for (Block* b : spare_blocks_) delete b;
    spare_blocks_.clear();
  }
};

namespace {

void validate(const CachingOptions& o) {
  auto bad = [](const std::string& what) { throw InvalidInput("caching pool: " + what); };
  if (!is_pow2(o.round_bytes) || o.round_bytes < 64)
    bad("round_bytes must be a power of two >= 64, got " + std::to_string(o.round_bytes));
  if (o.small_size == 0 || o.small_size % o.round_bytes != 0)
    bad("small_size must be a positive multiple of round_bytes");
  if (o.small_segment < o.small_size || o.small_segment % o.round_bytes != 0)
    bad("small_segment must be >= small_size and a multiple of round_bytes");
  if (o.round_large == 0 || o.round_large % o.round_bytes != 0)
    bad("round_large must be a positive multiple of round_bytes");
  if (o.min_large_alloc <= o.small_size) bad("min_large_alloc must be larger than small_size");
  if (o.large_segment < o.min_large_alloc || o.large_segment % o.round_bytes != 0)
    bad("large_segment must be >= min_large_alloc and a multiple of round_bytes");
  if (o.max_split_size != kNoLimit && o.max_split_size <= o.small_size)
    bad("max_split_size must be larger than small_size");
  for (const auto& [edge, div] : o.roundup_power2_divisions) {
    if (edge != 0 && !is_pow2(edge))
      bad("roundup_power2_divisions: interval edge " + std::to_string(edge) +
          " is not a power of two");
    if (div != 0 && !is_pow2(div))
      bad("roundup_power2_divisions: " + std::to_string(div) + " divisions is not a power of two");
  }
  if (!(o.garbage_collection_threshold >= 0.0 && o.garbage_collection_threshold < 1.0))
    bad("garbage_collection_threshold must be in [0, 1)");
  if (!(o.per_process_memory_fraction > 0.0 && o.per_process_memory_fraction <= 1.0))
    bad("per_process_memory_fraction must be in (0, 1]");
  if (o.expandable_segments && o.max_split_size != kNoLimit)
    bad("expandable_segments cannot be combined with max_split_size");
  if (o.expandable_map_chunk == 0) bad("expandable_map_chunk must be positive");
}

}  // namespace

CachingAllocator::CachingAllocator(device::DevicePtr device, CachingOptions options) {
  if (!device) throw InvalidInput("caching pool: no device");
  validate(options);
  impl_ = std::make_unique<Impl>(this, std::move(device), std::move(options));
  Impl& im = *impl_;
  const auto& o = im.options_;
  im.tc_on_ = o.thread_cache_bytes > 0;
  im.tc_fence_ = im.tc_on_ && o.thread_cache_membarrier && membarrier_available();
  im.tc_max_request_ = std::min(o.small_size, o.thread_cache_bytes);
  im.plain_rounding_ = o.roundup_power2_divisions.empty();
  if (o.per_process_memory_fraction < 1.0 || o.garbage_collection_threshold > 0.0) {
    const std::size_t total = im.device_->memory_info().total;
    im.allowed_ =
        static_cast<std::size_t>(o.per_process_memory_fraction * static_cast<double>(total));
  }
  if (o.expandable_segments) {
    const device::VmProbe probe = im.device_->probe_virtual_memory();
    if (!probe.supported)
      throw Unsupported("expandable_segments is not supported on " + im.device_->name() + " (" +
                        probe.reason + ")");
    im.page_ = im.device_->granularity();
    if (im.page_ == 0 || im.page_ % o.round_bytes != 0)
      throw Unsupported("expandable_segments: granularity " + std::to_string(im.page_) + " of " +
                        im.device_->name() + " is not a multiple of round_bytes");
    im.map_chunk_ = checked_align_up(std::max(o.expandable_map_chunk, im.page_), im.page_,
                                     "expandable_map_chunk");
  }
  im.active_.reserve(1024);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(impl_->mu_);
  impl_->release_everything();
}

void* CachingAllocator::allocate(std::size_t size, Stream stream) {
  return impl_->allocate(size, stream);
}

void CachingAllocator::deallocate(void* ptr) {
  impl_->deallocate(ptr);
}

Stats CachingAllocator::stats() const {
  return with_warnings(impl_->stats());
}

void CachingAllocator::reset_peak() {
  impl_->reset_peak();
}

void CachingAllocator::trim() {
  impl_->trim();
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  impl_->record_stream(ptr, stream);
}

void CachingAllocator::synchronize() {
  impl_->synchronize();
}

const CachingOptions& CachingAllocator::options() const noexcept {
  return impl_->options_;
}

const device::DevicePtr& CachingAllocator::device() const noexcept {
  return impl_->device_;
}

std::string CachingAllocator::describe() const {
  const auto& o = impl_->options_;
  std::string s = "caching on " + impl_->device_->name() + ": ";
  if (o.expandable_segments) {
    s += "expandable segments (page " + format_bytes(impl_->page_) + ")";
  } else {
    s += "small <= " + format_bytes(o.small_size) + " from " + format_bytes(o.small_segment) +
         " segments, large from " + format_bytes(o.large_segment) +
         " segments, >= " + format_bytes(o.min_large_alloc) + " rounded to " +
         format_bytes(o.round_large);
  }
  s += ", round " + format_bytes(o.round_bytes);
  s += ", max_split_size " +
       (o.max_split_size == kNoLimit ? std::string("unlimited") : format_bytes(o.max_split_size));
  s += ", roundup_power2_divisions ";
  if (o.roundup_power2_divisions.empty()) {
    s += "off";
  } else {
    bool first = true;
    for (const auto& [edge, div] : o.roundup_power2_divisions) {
      s += (first ? "[" : ",") + (edge == 0 ? std::string("*") : format_bytes(edge)) + ":" +
           std::to_string(div);
      first = false;
    }
    s += "]";
  }
  char buf[96];
  std::snprintf(buf, sizeof buf,
                ", garbage_collection_threshold %g, per_process_memory_fraction %g",
                o.garbage_collection_threshold, o.per_process_memory_fraction);
  s += buf;
  if (o.thread_cache_bytes > 0)
    s += ", thread cache " + format_bytes(o.thread_cache_bytes) + " per thread (" +
         (impl_->tc_fence_ ? "membarrier" : "atomic") + ")";
  return s;
}

}  // namespace modelmem::alloc

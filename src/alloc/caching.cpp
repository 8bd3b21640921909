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
#include "modelmem/alloc/caching.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory_resource>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "modelmem/error.hpp"

namespace modelmem::alloc {
namespace {

struct Segment;

struct Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;
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

  // ---------------------------------------------------------------- small helpers

  FreeSet& pool_of(bool small) { return small ? small_ : large_; }

  void count(CounterSet& c, bool small, std::int64_t delta) {
    const PoolKind k = small ? PoolKind::kSmall : PoolKind::kLarge;
    if (delta >= 0) {
      c.all.add(delta);
      c[k].add(delta);
    } else {
      c.all.sub(-delta);
      c[k].sub(-delta);
    }
  }

  Block* new_block() {
    if (spare_blocks_.empty()) return new Block;
    Block* b = spare_blocks_.back();
    spare_blocks_.pop_back();
    *b = Block{};
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
  void return_block(Block* b) {
    const bool small = b->small_request;
    count(stats_.active_bytes, small, -static_cast<std::int64_t>(b->size));
    count(stats_.active, small, -1);
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
    count(stats_.reserved_bytes, small, static_cast<std::int64_t>(bytes));
    count(stats_.segment, small, 1);
    ++stats_.num_device_alloc;
    owner_->emit(EventKind::kSegmentAlloc, s->base, bytes, stream);
    return b;
  }

  // Returns a fixed segment that is one free block to the device.
  void free_segment(Block* b) {
    Segment* s = b->segment;
    pool_erase(b);
    device_->deallocate(reinterpret_cast<void*>(s->base), s->size);
    count(stats_.reserved_bytes, s->small, -static_cast<std::int64_t>(s->size));
    count(stats_.segment, s->small, -1);
    ++stats_.num_device_free;
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

  void* allocate(std::size_t size, Stream stream) {
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
      if (b == nullptr) {
        // The out-of-memory ladder: give back everything cached, then try once more.
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
    active_.emplace(b->addr, b);
    const auto bytes = static_cast<std::int64_t>(b->size);
    count(stats_.allocated_bytes, small, bytes);
    count(stats_.requested_bytes, small, static_cast<std::int64_t>(size));
    count(stats_.allocation, small, 1);
    count(stats_.active_bytes, small, bytes);
    count(stats_.active, small, 1);
    owner_->emit(EventKind::kAlloc, b->addr, size, stream);
    return reinterpret_cast<void*>(b->addr);
  }

  Block* lookup(void* ptr, const char* what) {
    auto it = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == active_.end()) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "%s: pointer %p was not allocated by this caching pool or was already freed",
                    what, ptr);
      throw InvalidInput(buf);
    }
    return it->second;
  }

  void deallocate(void* ptr) {
    std::lock_guard lock(mu_);
    Block* b = lookup(ptr, "deallocate");
    active_.erase(b->addr);
    const bool small = b->small_request;
    count(stats_.allocated_bytes, small, -static_cast<std::int64_t>(b->size));
    count(stats_.requested_bytes, small, -static_cast<std::int64_t>(b->requested));
    count(stats_.allocation, small, -1);
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
    release_all_cached();
  }

  Stats stats() const {
    std::lock_guard lock(mu_);
    Stats s = stats_;
    s.largest_free_block = largest_free();
    return s;
  }

  void reset_peak() {
    std::lock_guard lock(mu_);
    for (CounterSet* c : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                          &stats_.inactive_split_bytes, &stats_.requested_bytes, &stats_.allocation,
                          &stats_.segment, &stats_.active, &stats_.inactive_split})
      c->reset_peak();
  }

  void release_everything() noexcept {
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

std::string mib(std::size_t bytes) {
  return format_bytes(bytes);
}

}  // namespace

CachingAllocator::CachingAllocator(device::DevicePtr device, CachingOptions options) {
  if (!device) throw InvalidInput("caching pool: no device");
  validate(options);
  impl_ = std::make_unique<Impl>(this, std::move(device), std::move(options));
  Impl& im = *impl_;
  const auto& o = im.options_;
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
  return impl_->stats();
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

void CachingAllocator::add_warning(std::string message) {
  std::lock_guard lock(impl_->mu_);
  impl_->stats_.warnings.push_back(std::move(message));
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
    s += "expandable segments (page " + mib(impl_->page_) + ")";
  } else {
    s += "small <= " + mib(o.small_size) + " from " + mib(o.small_segment) +
         " segments, large from " + mib(o.large_segment) +
         " segments, >= " + mib(o.min_large_alloc) + " rounded to " + mib(o.round_large);
  }
  s += ", round " + mib(o.round_bytes);
  s += ", max_split_size " +
       (o.max_split_size == kNoLimit ? std::string("unlimited") : mib(o.max_split_size));
  s += ", roundup_power2_divisions ";
  if (o.roundup_power2_divisions.empty()) {
    s += "off";
  } else {
    bool first = true;
    for (const auto& [edge, div] : o.roundup_power2_divisions) {
      s += (first ? "[" : ",") + (edge == 0 ? std::string("*") : mib(edge)) + ":" +
           std::to_string(div);
      first = false;
    }
    s += "]";
  }
  char buf[96];
  std::snprintf(buf, sizeof buf,
                ", garbage_collection_threshold %g, per_process_memory_fraction %g",
                o.garbage_collection_threshold, o.per_process_memory_fraction);
  return s + buf;
}

}  // namespace modelmem::alloc

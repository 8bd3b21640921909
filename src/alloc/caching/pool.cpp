// The caching pool's policy (PyTorch's CUDA caching allocator's, every constant configurable):
// request and segment sizes, best fit among a pool's free blocks, splitting and merging,
// fixed-size segments, giving cached memory back (trim, garbage collection, the out-of-memory
// ladder), and the locked allocate/free/record_stream/synchronize.
#include <time.h>
#include <bit>

#include <cstdio>

#include "alloc/caching/impl.hpp"

namespace modelmem::alloc {

unsigned CachingAllocator::Impl::divisions_for(std::size_t size) const {
  const auto& table = options_.roundup_power2_divisions;
  if (table.empty()) return 0;
  const std::size_t edge = std::bit_floor(size);
  auto it = table.find(edge);
  if (it == table.end()) it = table.find(0);
  return it == table.end() ? 0 : it->second;
}

std::size_t CachingAllocator::Impl::round_size(std::size_t size) const {
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

std::size_t CachingAllocator::Impl::segment_size(std::size_t rounded) const {
  if (rounded <= options_.small_size) return options_.small_segment;
  if (rounded < options_.min_large_alloc) return options_.large_segment;
  return checked_align_up(rounded, options_.round_large, "segment size");
}

bool CachingAllocator::Impl::should_split(const Block* b, std::size_t size) const {
  const std::size_t remaining = b->size - size;
  if (b->segment->small || b->segment->expandable) return remaining >= options_.round_bytes;
  return size < options_.max_split_size && remaining > options_.small_size;
}

Block* CachingAllocator::Impl::find_free(bool small, Stream stream, std::size_t size) {
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
    if (size >= options_.max_split_size && b->size >= size + options_.large_segment) return nullptr;
  }
  pool_erase(b);
  return b;
}

void CachingAllocator::Impl::split(Block* b, std::size_t size) {
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
Block* CachingAllocator::Impl::coalesce(Block* b) {
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

template <class More>
void CachingAllocator::Impl::release_oldest_while(More more) {
  if (!more()) return;
  std::vector<Block*> blocks = releasable_blocks();
  std::sort(blocks.begin(), blocks.end(),
            [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
  for (Block* b : blocks) {
    if (!more()) break;
    release_block(b);
  }
}

// A block comes back for good (freed with no other stream pending, or synchronized).
void CachingAllocator::Impl::return_block(Block* b, bool count_free) {
  const bool small = b->small_request;
  if (count_free) stats_.count_active(kind_of(small), b->size, false);
  b->allocated = false;
  b->pending = false;
  b->stream_uses.clear();
  b->free_tick = ++tick_;
  Block* merged = coalesce(b);
  pool_insert(merged);
  // A free that empties a whole segment while the cache is larger than what is live (and than
  // a floor of 64 MiB) gives cached segments back at once, the longest free first, until it is
  // not: a process that dropped most of its memory does not keep it for cache_decay_ms, and a
  // segment a loop empties and fills again each period (vLLM's prefill step) stays while stale
  // cache goes (giving back the segment just emptied made every prefill fault its pages in
  // again). cache_decay_ms:0 keeps PyTorch's behaviour (nothing goes back before empty_cache).
  auto over = [&] {
    const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all.current);
    const auto allocated = static_cast<std::size_t>(stats_.allocated_bytes.all.current);
    return reserved - allocated > std::max<std::size_t>(64u << 20, allocated);
  };
  if (count_free && options_.decay_ms != 0 && releasable(merged)) release_oldest_while(over);
}

bool CachingAllocator::Impl::within_allowed(std::size_t bytes) const {
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all.current);
  return allowed_ == kNoLimit || (bytes <= allowed_ && reserved <= allowed_ - bytes);
}

Block* CachingAllocator::Impl::new_segment(bool small, Stream stream, std::size_t rounded) {
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
  b->free_tick = ++tick_;  // a remainder split off it is as young as the segment
  s->head = b;
  stats_.count_segment(kind_of(small), bytes, true);
  owner_->emit(EventKind::kSegmentAlloc, s->base, bytes, stream);
  return b;
}

// Returns a fixed segment that is one free block to the device.
void CachingAllocator::Impl::free_segment(Block* b) {
  Segment* s = b->segment;
  pool_erase(b);
  device_->deallocate(reinterpret_cast<void*>(s->base), s->size);
  stats_.count_segment(kind_of(s->small), s->size, false);
  owner_->emit(EventKind::kSegmentFree, s->base, s->size, s->stream);
  fixed_segments_.erase(s);
  delete_block(b);
  delete s;
}

bool CachingAllocator::Impl::releasable(const Block* b) const {
  if (b->segment->expandable)
    return align_down(b->addr + b->size, page_) > checked_align_up(b->addr, page_, "release");
  return !b->is_split();
}

std::size_t CachingAllocator::Impl::release_block(Block* b) {
  if (b->segment->expandable) return unmap_free_block(b);
  const std::size_t bytes = b->segment->size;
  free_segment(b);
  return bytes;
}

std::vector<Block*> CachingAllocator::Impl::releasable_blocks() {
  std::vector<Block*> out;
  for (FreeSet* pool : {&small_, &large_})
    for (Block* b : *pool)
      if (releasable(b)) out.push_back(b);
  return out;
}

std::size_t CachingAllocator::Impl::release_all_cached() {
  std::size_t freed = 0;
  for (Block* b : releasable_blocks()) freed += release_block(b);
  return freed;
}

// garbage_collection_threshold: once reserved memory passes the threshold, give back cached
// memory, oldest first, until it is under again; this trades a few device calls for not
// hitting the full release-and-retry later.
void CachingAllocator::Impl::garbage_collect() {
  if (options_.garbage_collection_threshold <= 0.0 || allowed_ == kNoLimit) return;
  const auto limit = static_cast<std::size_t>(options_.garbage_collection_threshold *
                                              static_cast<double>(allowed_));
  auto reserved = [&] { return static_cast<std::size_t>(stats_.reserved_bytes.all.current); };
  release_oldest_while([&] { return reserved() > limit; });
}

void CachingAllocator::Impl::decay() {
  if (options_.decay_ms == 0) return;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const std::uint64_t now = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
                            static_cast<std::uint64_t>(ts.tv_nsec);
  if (now < next_decay_sample_ns_) return;
  const std::uint64_t period = static_cast<std::uint64_t>(options_.decay_ms) * 1'000'000u;
  next_decay_sample_ns_ = now + std::max<std::uint64_t>(period / 4, 1'000'000u);
  decay_samples_.emplace_back(now, tick_);
  // The newest sample at least a period old: blocks freed before it are due.
  std::uint64_t due = 0;
  bool any = false;
  while (!decay_samples_.empty() && decay_samples_.front().first + period <= now) {
    due = decay_samples_.front().second;
    any = true;
    decay_samples_.pop_front();
  }
  if (!any) return;
  decay_samples_.emplace_front(now - period, due);  // kept: it still bounds later checks
  for (Block* b : releasable_blocks())
    if (b->free_tick <= due) release_block(b);
}

Block* CachingAllocator::Impl::get_new(bool small, Stream stream, std::size_t rounded) {
  return options_.expandable_segments ? expand(small, stream, rounded)
                                      : new_segment(small, stream, rounded);
}

std::size_t CachingAllocator::Impl::largest_free() const {
  if (!largest_stale_) return largest_count_ == 0 ? 0 : largest_size_;
  std::size_t best = 0, count = 0;
  for (const FreeSet* pool : {&small_, &large_})
    for (const Block* b : *pool) {
      if (b->size > best) {
        best = b->size;
        count = 0;
      }
      count += b->size == best;
    }
  largest_size_ = best;
  largest_count_ = count;
  largest_stale_ = false;
  return best;
}

[[noreturn]] void CachingAllocator::Impl::throw_oom(std::size_t size, Stream) {
  ++stats_.num_ooms;
  OomInfo info;
  info.requested = size;
  try {
    info.device_free = device_->memory_info().free;
  } catch (...) {
  }
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all.current);
  const std::size_t rounded = round_size(size);
  info.needed = options_.expandable_segments
                    ? checked_align_up(rounded, options_.round_large, "allocation size")
                    : segment_size(rounded);
  std::string note;
  if (allowed_ != kNoLimit) {
    info.device_free = std::min(info.device_free, allowed_ > reserved ? allowed_ - reserved : 0);
    note = " (per_process_memory_fraction caps reserved at " + format_bytes(allowed_) + ")";
  }
  info.reserved = reserved;
  info.allocated = static_cast<std::size_t>(stats_.allocated_bytes.all.current);
  info.largest_free_block = largest_free();
  info.where = "caching pool on " + device_->name();
  // Where the free memory is: what is cached is held in pieces of segments that still hold live
  // blocks (the ladder gave every whole free segment back), in the size class of its segment.
  std::size_t free_bytes[2] = {0, 0}, largest[2] = {0, 0};
  for (int k = 0; k < 2; ++k)
    for (const Block* b : k == 0 ? small_ : large_) {
      free_bytes[k] += b->size;
      largest[k] = std::max(largest[k], b->size);
    }
  note += "; free in its segments: " + format_bytes(free_bytes[0]) +
          " in the small pool (largest " + format_bytes(largest[0]) +
          ", for requests <= " + format_bytes(options_.small_size) + "), " +
          format_bytes(free_bytes[1]) + " in the large pool (largest " + format_bytes(largest[1]) +
          "); the request needed " + format_bytes(info.needed) +
          (options_.expandable_segments ? " of new pages" : " as a new segment");
  if (free_bytes[0] + free_bytes[1] >= rounded)
    note += " (fragmentation: enough is free, but not in one piece where this request can use it)";
  throw OutOfMemory(info, modelmem::describe(info) + note);
}

// First rung of the out-of-memory ladder: blocks parked in thread caches go back to the pool,
// and with max_split_size, cached oversize blocks (never split, so never reused for smaller
// requests) are freed: the smallest one that covers the request, else the largest ones until
// their total does. Returns true when it freed or recovered anything.
bool CachingAllocator::Impl::release_parked_and_oversize(bool pool, std::size_t rounded) {
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

[[gnu::noinline]] void* CachingAllocator::Impl::allocate_locked(std::size_t size, Stream stream) {
  std::lock_guard lock(mu_);
  decay();
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
  return reinterpret_cast<void*>(b->addr);
}

[[noreturn]] void CachingAllocator::Impl::not_live(void* ptr, const char* what) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "%s: pointer %p was not allocated by this caching pool or was already freed", what,
                ptr);
  throw InvalidInput(buf);
}

// The live block at `ptr` (settled with any thread cache that knows it), or InvalidInput.
Block* CachingAllocator::Impl::lookup(void* ptr, const char* what) {
  auto it = active_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == active_.end() || !detach(it->second)) not_live(ptr, what);
  return it->second;
}

[[gnu::noinline]] void CachingAllocator::Impl::deallocate_locked(void* ptr) {
  std::lock_guard lock(mu_);
  decay();
  Block* b = lookup(ptr, "deallocate");
  active_.erase(b->addr);
  const bool small = b->small_request;
  stats_.count_handed_out(kind_of(small), b->size, b->requested_counted, false);
  fix_r_ +=
      static_cast<std::int64_t>(b->requested_counted) - static_cast<std::int64_t>(b->requested);
  if (!b->stream_uses.empty()) {
    b->allocated = false;
    b->pending = true;
    pending_.push_back(b);
    return;
  }
  return_block(b);
}

void CachingAllocator::Impl::record_stream(void* ptr, Stream stream) {
  std::lock_guard lock(mu_);
  Block* b = lookup(ptr, "record_stream");
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void CachingAllocator::Impl::synchronize() {
  std::lock_guard lock(mu_);
  std::vector<Block*> blocks;
  blocks.swap(pending_);
  for (Block* b : blocks) return_block(b);
}

void CachingAllocator::Impl::trim() {
  std::lock_guard lock(mu_);
  flush_thread_caches();
  release_all_cached();
}

}  // namespace modelmem::alloc

// The caching pool's expandable segments: per (stream, pool), one range of address space is
// reserved and pages are mapped on demand at the lowest address where a request fits (merging
// with free mapped blocks on either side); whole free pages are unmapped to recycle physical
// memory or on trim. Unmapped blocks sit in their segment's `unmapped` set, page-aligned.
#include <limits>
#include <vector>

#include "alloc/caching/impl.hpp"

namespace modelmem::alloc {

// Merges an unmapped block (in no set) with unmapped neighbours and files it.
void CachingAllocator::Impl::file_unmapped(Block* b) {
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

Segment* CachingAllocator::Impl::expandable_segment(bool small, Stream stream) {
  auto key = std::make_pair(stream, small);
  if (auto it = expandable_.find(key); it != expandable_.end()) return it->second;
  // Address space costs no memory, and a range no larger than the device's memory runs out of
  // addresses before it runs out of memory: live blocks scattered through it leave holes,
  // mapped or not, each too small for the next large request. By default twice the device's
  // memory is reserved (PyTorch reserves 1.125 times): under a pool's quota, PyTorch eager's
  // allocation sequence of ResNet-50, EfficientNet-B0 and ViT-B/16 at batch 512 needed a quota
  // of 1.47-1.63 times its live peak with one times, 1.31-1.45 with 1.125, 1.01 with two
  // (docs/benchmarks.md, *expandable-address-space*). A device that refuses so much is asked
  // for 1.125 times, then once its memory.
  std::vector<std::size_t> sizes;
  if (options_.expandable_reserve != 0) {
    sizes.push_back(options_.expandable_reserve);
  } else {
    const std::size_t total = device_->memory_info().total;
    if (total <= std::numeric_limits<std::size_t>::max() / 2) sizes.push_back(2 * total);
    if (total <= std::numeric_limits<std::size_t>::max() - total / 8) {
      sizes.push_back(total + total / 8);
    }
    sizes.push_back(total);
  }
  void* p = nullptr;
  std::size_t bytes = 0;
  for (std::size_t want : sizes) {
    bytes = checked_align_up(std::max(want, page_), page_, "expandable_reserve");
    try {
      p = device_->reserve(bytes);
      break;
    } catch (const OutOfMemory&) {
      p = nullptr;
    }
  }
  if (p == nullptr) return nullptr;
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
bool CachingAllocator::Impl::map_range(Segment* s, std::uintptr_t addr, std::size_t bytes) {
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

void CachingAllocator::Impl::unmap_range(Segment* s, std::uintptr_t addr, std::size_t bytes) {
  device_->unmap(reinterpret_cast<void*>(addr), bytes);
  s->mapped -= bytes;
  count(stats_.reserved_bytes, s->small, -static_cast<std::int64_t>(bytes));
  ++stats_.num_device_free;
  owner_->emit(EventKind::kUnmap, addr, bytes, s->stream);
}

// Maps pages at the lowest address of the (stream, pool) range where `size` fits, counting
// free mapped blocks on either side of an unmapped run; returns the free block (in no set).
Block* CachingAllocator::Impl::expand(bool small, Stream stream, std::size_t size) {
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
std::size_t CachingAllocator::Impl::unmap_free_block(Block* b) {
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
void CachingAllocator::Impl::recycle_pages(std::size_t bytes, const Block* keep1,
                                           const Block* keep2) {
  std::vector<Block*> blocks;
  for (FreeSet* pool : {&small_, &large_})
    for (Block* b : *pool)
      if (b != keep1 && b != keep2 && b->segment->expandable && releasable(b)) blocks.push_back(b);
  if (blocks.empty()) return;
  std::sort(blocks.begin(), blocks.end(),
            [](const Block* a, const Block* b) { return a->free_tick < b->free_tick; });
  std::size_t freed = 0;
  for (Block* b : blocks) {
    if (freed >= bytes) break;
    freed += unmap_free_block(b);
  }
}

}  // namespace modelmem::alloc

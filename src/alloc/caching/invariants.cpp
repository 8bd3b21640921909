// The caching pool's invariant checker (CachingAllocator::check_invariants): walks every segment
// under the pool's lock and checks what impl.hpp states: the blocks tile each segment, every
// block sits in exactly one place (the live map, a pool's free set, a segment's unmapped set, or
// the pending list), no two adjacent blocks are both free or both unmapped, and the statistics
// equal a recount. Built always (O(blocks) per call, nothing on the hot path); the random and
// stress tests call it after every operation in builds with MODELMEM_CHECK_INVARIANTS.
#include <sstream>
#include <unordered_set>

#include "alloc/caching/impl.hpp"

namespace modelmem::alloc {
namespace {

// Recounted statistics, per pool kind (index 1 small, 2 large).
struct Recount {
  std::int64_t allocated_bytes[3] = {}, requested_bytes[3] = {}, allocation[3] = {};
  std::int64_t active_bytes[3] = {}, active[3] = {};
  std::int64_t reserved_bytes[3] = {}, segment[3] = {};
  std::int64_t inactive_split_bytes[3] = {}, inactive_split[3] = {};
};

int index_of(bool small) {
  return small ? 1 : 2;
}

std::string hex(std::uintptr_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

}  // namespace

std::string CachingAllocator::do_check_invariants() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  std::ostringstream err;
  Recount r;
  std::unordered_set<const Block*> seen, in_pool, pending;
  std::size_t allocated_blocks = 0, unmapped_blocks = 0;
  for (const Block* b : m.pending_) pending.insert(b);

  auto walk = [&](const Segment* s) -> bool {
    if (s->head == nullptr || s->head->addr != s->base || s->head->prev != nullptr) {
      err << "segment " << hex(s->base) << ": first block does not start it";
      return false;
    }
    const Block* prev = nullptr;
    std::uintptr_t end = s->base;
    std::size_t mapped = 0;
    for (const Block* b = s->head; b != nullptr; prev = b, b = b->next) {
      const std::string at = "block " + hex(b->addr) + " (" + std::to_string(b->size) + " B)";
      if (b->segment != s || b->prev != prev || b->size == 0 || b->addr != end) {
        err << at << " of segment " << hex(s->base)
            << ": blocks do not tile the segment in address order";
        return false;
      }
      if (!seen.insert(b).second) {
        err << at << ": in two segments";
        return false;
      }
      end = b->addr + b->size;
      if (b->stream != s->stream) {
        err << at << ": stream " << b->stream << " in a segment of stream " << s->stream;
        return false;
      }
      const int k = index_of(s->small);
      if (!b->mapped) {
        ++unmapped_blocks;
        if (!s->expandable || b->allocated || b->pending ||
            !s->unmapped.count(const_cast<Block*>(b))) {
          err << at << ": unmapped but allocated, pending, or not in its segment's unmapped set";
          return false;
        }
        if (b->addr % m.page_ != 0 || b->size % m.page_ != 0) {
          err << at << ": unmapped block not on page boundaries";
          return false;
        }
        if (prev != nullptr && !prev->mapped) {
          err << at << ": two adjacent unmapped blocks";
          return false;
        }
        continue;
      }
      mapped += b->size;
      if (b->allocated) {
        ++allocated_blocks;
        auto it = m.active_.find(b->addr);
        if (b->pending || it == m.active_.end() || it->second != b) {
          err << at << ": allocated but not in the live map";
          return false;
        }
        const int kr = index_of(b->small_request);
        r.allocated_bytes[kr] += static_cast<std::int64_t>(b->size);
        r.requested_bytes[kr] += static_cast<std::int64_t>(b->requested_counted);
        r.allocation[kr] += 1;
        r.active_bytes[kr] += static_cast<std::int64_t>(b->size);
        r.active[kr] += 1;
      } else if (b->pending) {
        if (!pending.count(b)) {
          err << at << ": pending but not in the pending list";
          return false;
        }
        const int kr = index_of(b->small_request);
        r.active_bytes[kr] += static_cast<std::int64_t>(b->size);
        r.active[kr] += 1;
      } else {
        const FreeSet& pool = s->small ? m.small_ : m.large_;
        auto it = pool.find(const_cast<Block*>(b));
        if (it == pool.end() || *it != b) {
          err << at << ": free but not in its pool's free set";
          return false;
        }
        in_pool.insert(b);
        if (prev != nullptr && prev->in_pool()) {
          err << at << ": two adjacent free blocks (not merged)";
          return false;
        }
        if (b->is_split()) {
          r.inactive_split_bytes[k] += static_cast<std::int64_t>(b->size);
          r.inactive_split[k] += 1;
        }
      }
    }
    if (end != s->base + s->size) {
      err << "segment " << hex(s->base) << ": block sizes sum to " << (end - s->base)
          << " B, the segment has " << s->size << " B";
      return false;
    }
    if (s->expandable && mapped != s->mapped) {
      err << "segment " << hex(s->base) << ": " << mapped << " B in mapped blocks, " << s->mapped
          << " B counted as mapped";
      return false;
    }
    const int k = index_of(s->small);
    r.reserved_bytes[k] += static_cast<std::int64_t>(s->expandable ? s->mapped : s->size);
    r.segment[k] += 1;
    return true;
  };
  for (const Segment* s : m.fixed_segments_)
    if (s->expandable || !walk(s))
      return err.str().empty() ? "fixed segment marked expandable" : err.str();
  for (const auto& [key, s] : m.expandable_)
    if (!s->expandable || !walk(s))
      return err.str().empty() ? "expandable segment marked fixed" : err.str();

  // Every block in a set or map was met in a segment, so "exactly one place" holds.
  if (m.small_.size() + m.large_.size() != in_pool.size())
    return "free sets hold " + std::to_string(m.small_.size() + m.large_.size()) +
           " blocks, the segments " + std::to_string(in_pool.size()) + " free ones";
  if (!m.largest_stale_) {  // the largest free block kept for stats() (impl.hpp)
    std::size_t largest = 0, count = 0;
    for (const Block* b : in_pool) {
      if (b->size > largest) {
        largest = b->size;
        count = 0;
      }
      count += b->size == largest;
    }
    if (largest != (m.largest_count_ == 0 ? 0 : m.largest_size_) ||
        (largest != 0 && count != m.largest_count_))
      return "largest free block kept as " + std::to_string(m.largest_count_) + " x " +
             std::to_string(m.largest_size_) + " B, the free sets hold " + std::to_string(count) +
             " x " + std::to_string(largest) + " B";
  }
  if (m.active_.size() != allocated_blocks)
    return "live map holds " + std::to_string(m.active_.size()) + " blocks, the segments " +
           std::to_string(allocated_blocks) + " allocated ones";
  if (pending.size() != m.pending_.size()) return "a block is twice in the pending list";
  for (const Block* b : pending)
    if (!seen.count(b) || !b->pending) return "pending list holds a block that is not pending";
  std::size_t unmapped_in_sets = 0;
  for (const auto& [key, s] : m.expandable_) unmapped_in_sets += s->unmapped.size();
  if (unmapped_in_sets != unmapped_blocks)
    return "unmapped sets hold " + std::to_string(unmapped_in_sets) + " blocks, the segments " +
           std::to_string(unmapped_blocks);

  // The pool's own counters (which count blocks parked in thread caches as allocated).
  auto compare = [&](const char* name, const CounterSet& c, const std::int64_t(&want)[3]) {
    const std::int64_t all = want[1] + want[2];
    if (c.all.current == all && c.small.current == want[1] && c.large.current == want[2])
      return true;
    err << "stats: " << name << " is " << c.all.current << " (small " << c.small.current
        << ", large " << c.large.current << "), a recount gives " << all << " (small " << want[1]
        << ", large " << want[2] << ")";
    return false;
  };
  const Stats& s = m.stats_;
  if (!compare("allocated_bytes", s.allocated_bytes, r.allocated_bytes) ||
      !compare("requested_bytes", s.requested_bytes, r.requested_bytes) ||
      !compare("allocation", s.allocation, r.allocation) ||
      !compare("active_bytes", s.active_bytes, r.active_bytes) ||
      !compare("active", s.active, r.active) ||
      !compare("reserved_bytes", s.reserved_bytes, r.reserved_bytes) ||
      !compare("segment", s.segment, r.segment) ||
      !compare("inactive_split_bytes", s.inactive_split_bytes, r.inactive_split_bytes) ||
      !compare("inactive_split", s.inactive_split, r.inactive_split))
    return err.str();
  return {};
}

// The counters against the sizes of the containers they count (O(1)): a live block is counted
// once, a segment once, and nothing allocated lies outside what is reserved.
std::string CachingAllocator::do_check_local() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  const Stats& s = m.stats_;
  const auto segments = static_cast<std::int64_t>(m.fixed_segments_.size() + m.expandable_.size());
  if (s.allocation.all.current != static_cast<std::int64_t>(m.active_.size()))
    return "stats: allocation is " + std::to_string(s.allocation.all.current) +
           ", the live map holds " + std::to_string(m.active_.size()) + " blocks";
  if (s.segment.all.current != segments)
    return "stats: segment is " + std::to_string(s.segment.all.current) + ", the pool holds " +
           std::to_string(segments);
  if (s.allocated_bytes.all.current < 0 ||
      s.allocated_bytes.all.current > s.reserved_bytes.all.current)
    return "stats: allocated_bytes " + std::to_string(s.allocated_bytes.all.current) +
           " exceeds reserved_bytes " + std::to_string(s.reserved_bytes.all.current);
  return {};
}

// Every block is met once in its segment, and the free sets, the live map, the pending list
// and the unmapped sets are walked once more.
std::size_t CachingAllocator::do_invariant_size() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  std::size_t n = 2 * (m.active_.size() + m.small_.size() + m.large_.size() + m.pending_.size()) +
                  m.fixed_segments_.size();
  for (const auto& [key, s] : m.expandable_) n += 1 + 2 * s->unmapped.size();
  return n;
}

}  // namespace modelmem::alloc

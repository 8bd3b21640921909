// The static strategy. Free space is the shared best-fit coalescing free list (core/free_list.hpp:
// best fit in O(log n), lowest address among equals so the arena fills from the bottom and stays
// compact, neighbours merged on free). The segment is taken once in the constructor and returned
// only in the destructor; nothing here ever asks the device again.
#include "modelmem/alloc/static_allocator.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "invariant_probe.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/core/free_list.hpp"

namespace modelmem::alloc {
namespace {

std::string hex_address(std::uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

struct StaticAllocator::Impl {
  struct Live {
    std::size_t size;       // block size after rounding
    std::size_t requested;  // what the caller asked for
    Stream stream;
  };

  device::DevicePtr device;
  StaticOptions options;
  void* segment = nullptr;  // what the device returned
  std::uintptr_t base = 0;  // first aligned address inside it
  std::size_t usable = 0;   // bytes from base that blocks may use
  PoolKind segment_pool = PoolKind::kLarge;

  using LiveMap = std::unordered_map<std::uintptr_t, Live>;

  mutable std::mutex mutex;
  core::FreeList free;
  LiveMap live;
  // Nodes taken out of the live map are kept and reused, so a steady pattern of requests never
  // calls the C heap (it halves the cost of an alloc+free pair); the free list does the same.
  std::vector<LiveMap::node_type> spare_live;
  Stats stats;

  void insert_live(std::uintptr_t address, Live block) {
    if (spare_live.empty()) {
      live.emplace(address, block);
      return;
    }
    auto node = std::move(spare_live.back());
    spare_live.pop_back();
    node.key() = address;
    node.mapped() = block;
    live.insert(std::move(node));
  }
  void erase_live(LiveMap::iterator it) { spare_live.push_back(live.extract(it)); }

  std::size_t largest_free() const { return free.largest(); }

  // Free memory between live blocks counts as "inactive split" (PyTorch's name for free bytes
  // inside a segment that is partly in use); an idle arena has none.
  void update_split_counters() {
    std::int64_t want_bytes = live.empty() ? 0 : static_cast<std::int64_t>(free.bytes());
    std::int64_t want_count = live.empty() ? 0 : static_cast<std::int64_t>(free.count());
    auto adjust = [&](CounterSet& set, std::int64_t want) {
      std::int64_t delta = want - set.all.current;
      if (delta > 0) set.add(segment_pool, delta);
      if (delta < 0) set.sub(segment_pool, -delta);
    };
    adjust(stats.inactive_split_bytes, want_bytes);
    adjust(stats.inactive_split, want_count);
  }

  std::string where() const { return "static pool on " + device->name(); }
};

StaticAllocator::StaticAllocator(device::DevicePtr device, StaticOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!device) throw InvalidInput("static pool: no device");
  if (options.budget == 0) throw InvalidInput("static pool: budget must be > 0 bytes");
  if (options.alignment == 0 || (options.alignment & (options.alignment - 1)) != 0)
    throw InvalidInput("static pool: alignment " + std::to_string(options.alignment) +
                       " is not a power of two");
  if (options.budget < options.alignment)
    throw InvalidInput("static pool: budget of " + format_bytes(options.budget) +
                       " is smaller than the alignment " + std::to_string(options.alignment));
  Impl& m = *impl_;
  m.device = std::move(device);
  m.options = options;
  m.segment = m.device->allocate(options.budget);
  auto raw = reinterpret_cast<std::uintptr_t>(m.segment);
  m.base = (raw + options.alignment - 1) & ~(static_cast<std::uintptr_t>(options.alignment) - 1);
  std::size_t lost = static_cast<std::size_t>(m.base - raw);
  m.usable = lost >= options.budget ? 0 : (options.budget - lost) & ~(options.alignment - 1);
  if (m.usable == 0) {
    m.device->deallocate(m.segment, options.budget);
    throw InvalidInput("static pool: budget of " + format_bytes(options.budget) +
                       " leaves no aligned space on " + m.device->name());
  }
  m.free.release(0, m.usable);
  m.segment_pool = pool_of_request(options.budget);
  m.stats.count_segment(m.segment_pool, options.budget, true);
  emit(EventKind::kSegmentAlloc, raw, options.budget);
}

StaticAllocator::~StaticAllocator() {
  Impl& m = *impl_;
  emit(EventKind::kSegmentFree, reinterpret_cast<std::uintptr_t>(m.segment), m.options.budget);
  m.device->deallocate(m.segment, m.options.budget);
}

void* StaticAllocator::do_allocate(std::size_t size, Stream stream) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mutex);
  const std::size_t rounded = (size + m.options.alignment - 1) & ~(m.options.alignment - 1);
  const auto fit = size <= m.usable ? m.free.best_fit(rounded) : std::nullopt;
  if (!fit) {
    ++m.stats.num_ooms;
    OomInfo info;
    info.requested = size;
    info.reserved = m.options.budget;
    info.allocated = static_cast<std::size_t>(m.stats.allocated_bytes.all.current);
    info.largest_free_block = m.largest_free();
    info.where = m.where();
    lock.unlock();
    // Asked outside the lock: the device may be shared and slow; the numbers above are a
    // consistent snapshot of this pool.
    info.device_free = m.device->memory_info().free;
    throw OutOfMemory(std::move(info));
  }
  const std::size_t offset = fit->offset;
  m.free.take(*fit, offset, rounded);

  const std::uintptr_t address = m.base + offset;
  m.insert_live(address, Impl::Live{rounded, size, stream});
  m.stats.count_block(pool_of_request(size), rounded, size, true);
  m.update_split_counters();
  return reinterpret_cast<void*>(address);
}

void StaticAllocator::do_deallocate(void* ptr) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  auto live = m.live.find(address);
  if (live == m.live.end()) {
    bool inside = address >= m.base && address < m.base + m.usable;
    throw InvalidInput("static pool: free of " + hex_address(address) +
                       (inside ? ", which is not a live block (double free?)"
                               : ", which this pool did not hand out"));
  }
  const Impl::Live block = live->second;
  m.erase_live(live);

  m.free.release(static_cast<std::size_t>(address - m.base), block.size);

  m.stats.count_block(pool_of_request(block.requested), block.size, block.requested, false);
  m.update_split_counters();
}

Stats StaticAllocator::do_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Stats s = impl_->stats;
  s.largest_free_block = impl_->largest_free();
  return s;
}

void StaticAllocator::do_reset_peak() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stats.reset_peaks();
}

// The arena was obtained at construction, before any listener: a new listener hears of it first.
void StaticAllocator::do_set_listener(Listener* listener) noexcept {
  if (listener != nullptr)
    emit(EventKind::kSegmentAlloc, reinterpret_cast<std::uintptr_t>(impl_->segment),
         impl_->options.budget);
}

LiveBlock StaticAllocator::do_block(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == impl_->live.end()) return {};
  return LiveBlock{it->second.requested, it->second.stream, 0};
}

// Live blocks and free ranges tile the usable space exactly, free ranges are merged, and the
// statistics equal a recount of the live blocks.
std::string StaticAllocator::do_check_invariants() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  std::map<std::size_t, std::pair<std::size_t, bool>> pieces;  // offset -> (size, free)
  std::int64_t bytes = 0, requested = 0;
  for (const auto& [address, block] : m.live) {
    if (address < m.base || address - m.base + block.size > m.usable)
      return "live block " + hex_address(address) + " lies outside the arena";
    if (block.size % m.options.alignment != 0 || block.requested > block.size)
      return "live block " + hex_address(address) + " has size " + std::to_string(block.size) +
             " for a request of " + std::to_string(block.requested);
    pieces.emplace(static_cast<std::size_t>(address - m.base), std::pair{block.size, false});
    bytes += static_cast<std::int64_t>(block.size);
    requested += static_cast<std::int64_t>(block.requested);
  }
  for (const auto& [offset, size] : m.free.by_offset())
    if (!pieces.emplace(offset, std::pair{size, true}).second)
      return "offset " + std::to_string(offset) + " is both free and live";
  std::size_t at = 0;
  bool previous_free = false;
  for (const auto& [offset, piece] : pieces) {
    if (offset != at)
      return "the arena is not tiled at offset " + std::to_string(at) + " (next piece at " +
             std::to_string(offset) + ")";
    if (piece.second && previous_free)
      return "two adjacent free ranges at offset " + std::to_string(offset);
    previous_free = piece.second;
    at = offset + piece.first;
  }
  if (at != m.usable)
    return "the pieces end at " + std::to_string(at) + ", the arena at " + std::to_string(m.usable);
  if (m.stats.allocated_bytes.all.current != bytes ||
      m.stats.requested_bytes.all.current != requested ||
      m.stats.allocation.all.current != static_cast<std::int64_t>(m.live.size()))
    return "statistics differ from the live blocks (allocated " +
           std::to_string(m.stats.allocated_bytes.all.current) + ", recount " +
           std::to_string(bytes) + ")";
  return {};
}

std::string StaticAllocator::do_describe() const {
  const Impl& m = *impl_;
  return "static: one pool of " + format_bytes(m.options.budget) + " on " + m.device->name() +
         ", best fit with coalescing, alignment " + std::to_string(m.options.alignment);
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(StaticAllocator& a, std::int64_t delta) {
  std::lock_guard<std::mutex> lock(a.impl_->mutex);
  a.impl_->stats.allocated_bytes.all.current += delta;
}

std::string StaticAllocator::do_check_local() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.stats.allocation.all.current != static_cast<std::int64_t>(m.live.size()) ||
      m.stats.allocated_bytes.all.current < 0 ||
      static_cast<std::size_t>(m.stats.allocated_bytes.all.current) + m.free.bytes() != m.usable)
    return "statistics differ from the live blocks (" +
           std::to_string(m.stats.allocation.all.current) + " blocks and " +
           std::to_string(m.stats.allocated_bytes.all.current) + " B counted, " +
           std::to_string(m.live.size()) + " live, " + std::to_string(m.free.bytes()) +
           " B free of " + std::to_string(m.usable) + ")";
  return {};
}

std::size_t StaticAllocator::do_invariant_size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->live.size() + impl_->free.count();
}

}  // namespace modelmem::alloc

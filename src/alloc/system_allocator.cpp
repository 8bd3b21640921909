// The C heap with bookkeeping. The live map is what makes a double free an InvalidInput instead
// of heap corruption; it costs one hash lookup per call, which the benchmarks show separately
// from raw malloc.
#include "modelmem/alloc/system_allocator.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "invariant_probe.hpp"
#include "local_checks.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc {
struct SystemAllocator::Impl {
  struct Live {
    std::size_t size;
    std::size_t requested;
    Stream stream;
  };
  using LiveMap = std::unordered_map<std::uintptr_t, Live>;
  SystemOptions options;
  mutable std::mutex mutex;
  LiveMap live;
  std::vector<LiveMap::node_type> spare;  // reused, so the bookkeeping itself never mallocs
  Stats stats;
};

SystemAllocator::SystemAllocator(SystemOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.alignment < sizeof(void*) || (options.alignment & (options.alignment - 1)) != 0)
    throw InvalidInput("system: alignment " + std::to_string(options.alignment) +
                       " is not a power of two >= " + std::to_string(sizeof(void*)));
  impl_->options = options;
}

SystemAllocator::~SystemAllocator() {
  // Blocks the caller never returned are the caller's leak, but the heap is ours to clean.
  for (auto& [address, block] : impl_->live) std::free(reinterpret_cast<void*>(address));
}

void* SystemAllocator::do_allocate(std::size_t size, Stream stream) {
  Impl& m = *impl_;
  const std::size_t rounded =
      checked_align_up(size, m.options.alignment, "system: allocation size");
  void* ptr = std::aligned_alloc(m.options.alignment, rounded);
  if (ptr == nullptr) {
    OomInfo info;
    info.requested = size;
    info.where = "system heap";
    {
      std::lock_guard<std::mutex> lock(m.mutex);
      ++m.stats.num_ooms;
      info.reserved = static_cast<std::size_t>(m.stats.reserved_bytes.all.current);
      info.allocated = static_cast<std::size_t>(m.stats.allocated_bytes.all.current);
    }
    throw OutOfMemory(std::move(info));
  }
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.spare.empty()) {
      m.live.emplace(address, Impl::Live{rounded, size, stream});
    } else {
      auto node = std::move(m.spare.back());
      m.spare.pop_back();
      node.key() = address;
      node.mapped() = Impl::Live{rounded, size, stream};
      m.live.insert(std::move(node));
    }
    const PoolKind kind = pool_of_request(size);
    m.stats.count_block(kind, rounded, size, true);
    m.stats.count_segment(kind, rounded, true);
  }
  emit(EventKind::kSegmentAlloc, address, rounded, stream);
  return ptr;
}

void SystemAllocator::do_deallocate(void* ptr) {
  Impl& m = *impl_;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  Impl::Live block;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    auto it = m.live.find(address);
    if (it == m.live.end()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(address));
      throw InvalidInput(std::string("system: free of ") + buf +
                         ", which is not a live block of this allocator (double free?)");
    }
    block = it->second;
    m.spare.push_back(m.live.extract(it));
    const PoolKind kind = pool_of_request(block.requested);
    m.stats.count_block(kind, block.size, block.requested, false);
    m.stats.count_segment(kind, block.size, false);
  }
  // Told before the heap may hand the address to another thread, so listeners see events in order.
  emit(EventKind::kSegmentFree, address, block.size, block.stream);
  std::free(ptr);
}

Stats SystemAllocator::do_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

void SystemAllocator::do_reset_peak() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->stats.reset_peaks();
}

LiveBlock SystemAllocator::do_block(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == impl_->live.end()) return {};
  return LiveBlock{it->second.requested, it->second.stream, 0};
}

// Every block is its own "segment": the statistics equal a recount of the live blocks.
std::string SystemAllocator::do_check_invariants() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  std::int64_t bytes = 0, requested = 0;
  for (const auto& [address, block] : m.live) {
    if (address % m.options.alignment != 0 || block.size % m.options.alignment != 0 ||
        block.requested > block.size)
      return "live block " + std::to_string(address) + " is not aligned or too small";
    bytes += static_cast<std::int64_t>(block.size);
    requested += static_cast<std::int64_t>(block.requested);
  }
  const auto n = static_cast<std::int64_t>(m.live.size());
  if (m.stats.allocated_bytes.all.current != bytes || m.stats.reserved_bytes.all.current != bytes ||
      m.stats.requested_bytes.all.current != requested || m.stats.allocation.all.current != n ||
      m.stats.segment.all.current != n)
    return "statistics differ from the live blocks (allocated " +
           std::to_string(m.stats.allocated_bytes.all.current) + ", recount " +
           std::to_string(bytes) + ")";
  return {};
}

std::string SystemAllocator::do_describe() const {
  return "system: C heap (aligned_alloc/free), alignment " +
         std::to_string(impl_->options.alignment);
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(SystemAllocator& a, std::int64_t delta) {
  std::lock_guard<std::mutex> lock(a.impl_->mutex);
  a.impl_->stats.allocated_bytes.all.current += delta;
}

std::string SystemAllocator::do_check_local() const {
  std::lock_guard lock(impl_->mutex);
  return detail::check_block_per_segment(impl_->stats, impl_->live.size());
}

std::size_t SystemAllocator::do_invariant_size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->live.size();
}

}  // namespace modelmem::alloc

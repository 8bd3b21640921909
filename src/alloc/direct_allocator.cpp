// The direct strategy: a map of live blocks (pointer -> requested size, stream) and nothing
// else; the device is called outside the lock.
#include "modelmem/alloc/direct_allocator.hpp"

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "invariant_probe.hpp"
#include "local_checks.hpp"
#include "modelmem/core/error.hpp"

namespace modelmem::alloc {

struct DirectAllocator::Impl {
  device::DevicePtr device;
  mutable std::mutex mutex;
  std::unordered_map<void*, std::pair<std::size_t, Stream>> live;
  Stats stats;

  // One block is one segment (counted in the large pool): it is reserved, and one device call.
  void count(std::size_t size, bool added) noexcept {
    stats.count_block(PoolKind::kLarge, size, size, added);
    stats.count_segment(PoolKind::kLarge, size, added);
  }
};

DirectAllocator::DirectAllocator(device::DevicePtr device) : impl_(std::make_unique<Impl>()) {
  if (!device) throw InvalidInput("direct allocator: no device given");
  impl_->device = std::move(device);
}

DirectAllocator::~DirectAllocator() {
  for (auto& [p, block] : impl_->live) impl_->device->deallocate(p, block.first);
}

void* DirectAllocator::do_allocate(std::size_t size, Stream stream) {
  void* p = nullptr;
  try {
    p = impl_->device->allocate(size);
  } catch (const OutOfMemory& e) {
    // The device knows its free memory; the numbers of this allocator are added here.
    OomInfo info = e.info();
    {
      std::lock_guard lock(impl_->mutex);
      ++impl_->stats.num_ooms;
      info.reserved = static_cast<std::size_t>(impl_->stats.reserved_bytes.all.current);
      info.allocated = static_cast<std::size_t>(impl_->stats.allocated_bytes.all.current);
    }
    info.where = "direct allocator on " + (info.where.empty() ? impl_->device->name() : info.where);
    throw OutOfMemory(info);
  }
  {
    std::lock_guard lock(impl_->mutex);
    try {
      impl_->live.emplace(p, std::pair{size, stream});
    } catch (...) {
      impl_->device->deallocate(p, size);
      throw;
    }
    impl_->count(size, true);
  }
  emit(EventKind::kSegmentAlloc, reinterpret_cast<std::uintptr_t>(p), size, stream);
  return p;
}

void DirectAllocator::do_deallocate(void* ptr) {
  std::size_t size = 0;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->live.find(ptr);
    if (it == impl_->live.end())
      throw InvalidInput(
          "direct allocator: free of a pointer it did not hand out (or freed twice)");
    size = it->second.first;
    impl_->live.erase(it);
    impl_->count(size, false);
  }
  emit(EventKind::kSegmentFree, reinterpret_cast<std::uintptr_t>(ptr), size);
  impl_->device->deallocate(ptr, size);
}

Stats DirectAllocator::do_stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

void DirectAllocator::do_reset_peak() {
  std::lock_guard lock(impl_->mutex);
  impl_->stats.reset_peaks();
}

LiveBlock DirectAllocator::do_block(const void* ptr) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->live.find(const_cast<void*>(ptr));
  if (it == impl_->live.end()) return {};
  return LiveBlock{it->second.first, it->second.second, 0};
}

// One block is one segment: the statistics equal a recount of the live blocks.
std::string DirectAllocator::do_check_invariants() const {
  std::lock_guard lock(impl_->mutex);
  std::int64_t bytes = 0;
  for (const auto& [p, block] : impl_->live) bytes += static_cast<std::int64_t>(block.first);
  const Stats& s = impl_->stats;
  const auto n = static_cast<std::int64_t>(impl_->live.size());
  if (s.allocated_bytes.all.current != bytes || s.reserved_bytes.all.current != bytes ||
      s.allocation.all.current != n || s.segment.all.current != n)
    return "statistics differ from the live blocks (allocated " +
           std::to_string(s.allocated_bytes.all.current) + ", recount " + std::to_string(bytes) +
           ")";
  return {};
}

std::string DirectAllocator::do_describe() const {
  return "direct on " + impl_->device->name() + " (one segment per block, nothing cached)";
}

// The test hook (invariant_probe.hpp).
void InvariantProbe::skew(DirectAllocator& a, std::int64_t delta) {
  std::lock_guard lock(a.impl_->mutex);
  a.impl_->stats.allocated_bytes.all.current += delta;
}

std::string DirectAllocator::do_check_local() const {
  std::lock_guard lock(impl_->mutex);
  return detail::check_block_per_segment(impl_->stats, impl_->live.size());
}

std::size_t DirectAllocator::do_invariant_size() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->live.size();
}

}  // namespace modelmem::alloc

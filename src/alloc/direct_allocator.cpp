#include "modelmem/alloc/direct_allocator.hpp"

#include <mutex>
#include <unordered_map>

#include "modelmem/core/error.hpp"

namespace modelmem::alloc {

struct DirectAllocator::Impl {
  device::DevicePtr device;
  mutable std::mutex mutex;
  std::unordered_map<void*, std::size_t> live;
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
  for (auto& [p, size] : impl_->live) impl_->device->deallocate(p, size);
}

void* DirectAllocator::allocate(std::size_t size, Stream stream) {
  if (size == 0) throw InvalidInput("direct allocator: allocation of 0 bytes");
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
      impl_->live.emplace(p, size);
    } catch (...) {
      impl_->device->deallocate(p, size);
      throw;
    }
    impl_->count(size, true);
  }
  emit(EventKind::kAlloc, reinterpret_cast<std::uintptr_t>(p), size, stream);
  return p;
}

void DirectAllocator::deallocate(void* ptr) {
  std::size_t size = 0;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->live.find(ptr);
    if (it == impl_->live.end())
      throw InvalidInput(
          "direct allocator: free of a pointer it did not hand out (or freed twice)");
    size = it->second;
    impl_->live.erase(it);
    impl_->count(size, false);
  }
  impl_->device->deallocate(ptr, size);
  emit(EventKind::kFree, reinterpret_cast<std::uintptr_t>(ptr), size);
}

Stats DirectAllocator::stats() const {
  Stats s;
  {
    std::lock_guard lock(impl_->mutex);
    s = impl_->stats;
  }
  return with_warnings(std::move(s));
}

void DirectAllocator::reset_peak() {
  std::lock_guard lock(impl_->mutex);
  impl_->stats.reset_peaks();
}

std::string DirectAllocator::describe() const {
  return "direct on " + impl_->device->name() + " (one segment per block, nothing cached)";
}

}  // namespace modelmem::alloc

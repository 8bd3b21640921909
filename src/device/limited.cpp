// A capacity-limited device, optionally without virtual memory: the stand-in for an accelerator
// whose driver has no VMM API, so the expandable-segments fallback runs for real in tests.
#include <mutex>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::device {
namespace {

class LimitedDevice final : public Device {
 public:
  LimitedDevice(DevicePtr upstream, std::size_t capacity, bool virtual_memory, int index)
      : upstream_(std::move(upstream)),
        capacity_(capacity),
        virtual_memory_(virtual_memory),
        index_(index) {
    if (!upstream_) throw InvalidInput("limited device: no upstream device");
  }

  std::string name() const override { return "limited:" + std::to_string(index_); }

  void* allocate(std::size_t bytes) override {
    take(bytes);
    try {
      return upstream_->allocate(bytes);
    } catch (...) {
      give(bytes);
      throw;
    }
  }

  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (ptr == nullptr) return;
    upstream_->deallocate(ptr, bytes);
    give(bytes);
  }

  MemoryInfo memory_info() const override {
    std::lock_guard lock(mu_);
    return {capacity_ - used_, capacity_};
  }

  bool host_accessible() const noexcept override { return upstream_->host_accessible(); }
  bool prefer_large_pages(void* addr, std::size_t bytes) noexcept override {
    return upstream_->prefer_large_pages(addr, bytes);
  }

  VmProbe probe_virtual_memory() override {
    if (!virtual_memory_) return {false, "no virtual memory"};
    return upstream_->probe_virtual_memory();
  }

  std::size_t granularity() const override {
    return virtual_memory_ ? upstream_->granularity() : 0;
  }

  void* reserve(std::size_t bytes) override {
    require_vm();
    return upstream_->reserve(bytes);  // address space costs no capacity
  }

  void release(void* base, std::size_t bytes) noexcept override {
    if (virtual_memory_) upstream_->release(base, bytes);
  }

  void map(void* addr, std::size_t bytes) override {
    require_vm();
    take(bytes);
    try {
      upstream_->map(addr, bytes);
    } catch (...) {
      give(bytes);
      throw;
    }
  }

  void unmap(void* addr, std::size_t bytes) noexcept override {
    if (!virtual_memory_) return;
    upstream_->unmap(addr, bytes);
    give(bytes);
  }

 private:
  void require_vm() const {
    if (!virtual_memory_) throw Unsupported(name() + ": no virtual memory");
  }

  void take(std::size_t bytes) {
    std::lock_guard lock(mu_);
    if (bytes > capacity_ - used_) {
      OomInfo info;
      info.requested = bytes;
      info.device_free = capacity_ - used_;
      info.where = name();
      throw OutOfMemory(info, describe(info) + " (capacity " + format_bytes(capacity_) + ")");
    }
    used_ += bytes;
  }

  void give(std::size_t bytes) noexcept {
    std::lock_guard lock(mu_);
    used_ -= bytes < used_ ? bytes : used_;
  }

  DevicePtr upstream_;
  std::size_t capacity_;
  bool virtual_memory_;
  int index_;
  mutable std::mutex mu_;
  std::size_t used_ = 0;
};

}  // namespace

DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory,
                              int index) {
  return std::make_shared<LimitedDevice>(std::move(upstream), capacity, virtual_memory, index);
}

}  // namespace modelmem::device

// A capacity-limited device, optionally without virtual memory: the stand-in for an accelerator
// whose driver has no VMM API, so the expandable-segments fallback runs for real in tests.
#include <sys/mman.h>

#include <mutex>
#include <string>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/limited.hpp"

namespace modelmem::device {
namespace {

class LimitedDevice final : public Device {
 public:
  LimitedDevice(DevicePtr upstream, std::size_t capacity, bool virtual_memory, int index,
                std::string name = {})
      : upstream_(std::move(upstream)),
        capacity_(capacity),
        virtual_memory_(virtual_memory),
        name_(name.empty() ? "limited:" + std::to_string(index) : std::move(name)) {
    if (!upstream_) throw InvalidInput("limited device: no upstream device");
  }

  std::string name() const override { return name_; }

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
  std::string name_;
  mutable std::mutex mu_;
  std::size_t used_ = 0;
};

// Address space without memory: what a simulated accelerator hands out. Writing to it would
// commit host pages one by one (MAP_NORESERVE), so nothing does (host_accessible() is false).
class AddressSpaceDevice final : public Device {
 public:
  explicit AddressSpaceDevice(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void* allocate(std::size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) out_of_address_space(bytes);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override { ::munmap(ptr, bytes); }
  MemoryInfo memory_info() const override { return {}; }  // the limited device's capacity counts
  VmProbe probe_virtual_memory() override { return {true, ""}; }
  std::size_t granularity() const override { return kSimulatedPage; }
  void* reserve(std::size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) out_of_address_space(bytes);
    return p;
  }
  void release(void* base, std::size_t bytes) noexcept override { ::munmap(base, bytes); }
  void map(void*, std::size_t) override {}  // the capacity is counted by the limited device
  void unmap(void*, std::size_t) noexcept override {}

 private:
  static constexpr std::size_t kSimulatedPage = std::size_t{2} << 20;
  [[noreturn]] void out_of_address_space(std::size_t bytes) const {
    OomInfo info;
    info.requested = bytes;
    info.where = name_;
    throw OutOfMemory(info, name_ + ": no address space left for " + format_bytes(bytes));
  }
  std::string name_;
};

}  // namespace

DevicePtr make_simulated_device(std::size_t capacity, std::string name, bool virtual_memory) {
  if (capacity == 0) throw InvalidInput("simulated device " + name + ": capacity 0");
  auto space = std::make_shared<AddressSpaceDevice>(name);
  return std::make_shared<LimitedDevice>(std::move(space), capacity, virtual_memory, 0,
                                         std::move(name));
}

DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory,
                              int index) {
  return std::make_shared<LimitedDevice>(std::move(upstream), capacity, virtual_memory, index);
}

}  // namespace modelmem::device

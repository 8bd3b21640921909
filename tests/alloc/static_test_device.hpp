// A small device for the config helper's tests: page-aligned heap memory behind a capacity,
// with a ledger, so a test can check that a strategy took what it should and gave it all back.
#pragma once

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::testing {

class CountingDevice : public device::Device {
 public:
  explicit CountingDevice(std::size_t capacity) : capacity_(capacity) {}
  ~CountingDevice() override {
    for (auto& [p, n] : live_) std::free(reinterpret_cast<void*>(p));
  }
  std::string name() const override { return "counting:0"; }
  bool host_accessible() const noexcept override { return true; }
  void* allocate(std::size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++allocs_;
    if (bytes > capacity_ - used_) {
      OomInfo info;
      info.requested = bytes;
      info.device_free = capacity_ - used_;
      info.where = name();
      throw OutOfMemory(info);
    }
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) throw OutOfMemory(OomInfo{bytes, 0, 0, 0, 0, {}, name()});
    used_ += bytes;
    live_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == live_.end() || it->second != bytes) {
      ++bad_frees_;
      return;
    }
    used_ -= bytes;
    live_.erase(it);
    std::free(ptr);
  }
  device::MemoryInfo memory_info() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {capacity_ - used_, capacity_};
  }
  std::size_t used() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return used_;
  }
  int allocs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return allocs_;
  }
  int bad_frees() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bad_frees_;
  }

 private:
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t used_ = 0;
  int allocs_ = 0;
  int bad_frees_ = 0;
  std::map<std::uintptr_t, std::size_t> live_;
};

}  // namespace modelmem::testing

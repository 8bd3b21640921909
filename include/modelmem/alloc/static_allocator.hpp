// The static strategy: one allocation of a fixed budget at construction, best fit with
// coalescing inside it; never asks the device again. Exhaustion throws OutOfMemory.
#pragma once

#include <cstddef>
#include <memory>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::alloc {

struct StaticOptions {
  std::size_t budget = 0;       ///< bytes taken from the device at construction (> 0)
  std::size_t alignment = 256;  ///< every block is aligned to this (power of two)
};

/// Thread-safe (one mutex). O(log n) allocate and free.
class StaticAllocator : public Allocator {
 public:
  StaticAllocator(device::DevicePtr device, StaticOptions options);
  ~StaticAllocator() override;

  void* allocate(std::size_t size, Stream stream = 0) override;
  void deallocate(void* ptr) override;
  Stats stats() const override;
  void reset_peak() override;
  std::string describe() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc

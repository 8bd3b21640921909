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

 private:
  void* do_allocate(std::size_t size, Stream stream) override;
  void do_deallocate(void* ptr) override;
  Stats do_stats() const override;
  void do_reset_peak() override;
  std::string do_describe() const override;
  LiveBlock do_block(const void* ptr) const override;
  std::string do_check_invariants() const override;
  std::string do_check_local() const override;
  std::size_t do_invariant_size() const override;
  void do_set_listener(Listener* listener) noexcept override;
  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc

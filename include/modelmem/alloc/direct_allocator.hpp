// The direct strategy: every block is its own device segment, returned to the device when
// freed. Nothing is cached, so resident memory is exactly what is live; every request costs a
// device call (and page faults on first touch). The planned arena uses it as its fallback by
// default: after the first steps it only sees the few requests its plan does not cover.
#pragma once

#include <memory>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::alloc {

/// Thread-safe (one mutex around the bookkeeping; the device is called outside it). Blocks are
/// aligned as the device's segments are (a page on the host).
class DirectAllocator : public Allocator {
 public:
  /// Throws InvalidInput for a null device.
  explicit DirectAllocator(device::DevicePtr device);
  ~DirectAllocator() override;

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
  friend struct InvariantProbe;  // src/alloc/invariant_probe.hpp: tests break a state
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc

// Test support: a device that fails chosen calls and keeps a ledger of what was taken, so fault
// injection tests can check that every strategy gives back everything exactly once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "modelmem/device/device.hpp"

namespace modelmem::device {

/// Which call of a FaultyDevice fails.
enum class FaultOp : std::uint8_t { kAllocate, kMap, kReserve };

/// Wraps `upstream`; `should_fail(op, n)` is asked before the n-th (0-based) call of each kind
/// and makes that call throw OutOfMemory when it returns true. It also keeps a ledger of what
/// was taken (allocations, mapped pages, reservations) so a test can check that everything was
/// given back exactly once: a free of something not taken counts as a bad call.
class FaultyDevice : public Device {
 public:
  using Predicate = std::function<bool(FaultOp op, std::uint64_t n)>;
  FaultyDevice(DevicePtr upstream, Predicate should_fail);
  ~FaultyDevice() override;

  std::string name() const override;
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  MemoryInfo memory_info() const override;
  bool prefer_large_pages(void* addr, std::size_t bytes) noexcept override;
  bool host_accessible() const noexcept override { return upstream_->host_accessible(); }
  VmProbe probe_virtual_memory() override;
  std::size_t granularity() const override;
  void* reserve(std::size_t bytes) override;
  void release(void* base, std::size_t bytes) noexcept override;
  void map(void* addr, std::size_t bytes) override;
  void unmap(void* addr, std::size_t bytes) noexcept override;

  /// Calls of `op` so far (failed ones included).
  std::uint64_t calls(FaultOp op) const;
  /// Calls that failed because should_fail said so.
  std::uint64_t injected_failures() const;
  /// Bytes allocated and not freed, plus bytes mapped and not unmapped.
  std::size_t outstanding_bytes() const;
  /// Reservations not released.
  std::size_t outstanding_reservations() const;
  /// Frees, unmaps and releases that did not match something taken (must stay 0).
  std::uint64_t bad_calls() const;
  /// Replaces the predicate (e.g. to stop failing before cleanup).
  void set_predicate(Predicate should_fail);

 private:
  bool fail_now(FaultOp op);

  DevicePtr upstream_;
  mutable std::mutex mu_;
  Predicate should_fail_;
  std::uint64_t calls_[3] = {0, 0, 0};
  std::uint64_t injected_ = 0;
  std::uint64_t bad_ = 0;
  std::size_t page_ = 0;
  std::map<std::uintptr_t, std::size_t> allocations_;   // address -> bytes
  std::map<std::uintptr_t, std::size_t> reservations_;  // address -> bytes
  std::set<std::uintptr_t> mapped_pages_;
};

std::shared_ptr<FaultyDevice> make_faulty_device(
    DevicePtr upstream, std::function<bool(FaultOp op, std::uint64_t n)> should_fail);

}  // namespace modelmem::device

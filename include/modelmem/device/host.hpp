// Devices that need no accelerator: real host memory, a capacity-limited stand-in for an
// accelerator (optionally without virtual memory), and a fault injector for tests.
// All are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "modelmem/device.hpp"

namespace modelmem::device {

struct HostOptions {
  bool huge_pages = false;  ///< try 2 MiB pages (MAP_HUGETLB / madvise), fall back to normal pages
  bool prefault = false;    ///< MAP_POPULATE / touch pages so later use costs no page fault
  int index = 0;            ///< the N in the name "host:N"
};

/// Host memory from mmap/munmap; virtual memory by reserving PROT_NONE ranges and committing
/// pages with mprotect on map (and MADV_DONTNEED + PROT_NONE on unmap). Granularity is the OS
/// page size, or 2 MiB with huge_pages (transparent huge pages are requested with madvise, so
/// it works, with 4 KiB pages underneath, where no huge pages are available). memory_info()
/// reports the machine's physical memory.
DevicePtr make_host_device(HostOptions options = {});

/// Offers the whole 2 MiB pages inside [addr, addr + bytes) of host memory (private anonymous,
/// read-write) to transparent huge pages (madvise(MADV_HUGEPAGE)). False when the range holds
/// no whole 2 MiB page or the kernel refuses (no THP support). Pages touched before the call
/// stay small until the kernel's khugepaged collapses them.
bool advise_huge_pages(void* addr, std::size_t bytes) noexcept;

/// The system's transparent-huge-page mode ("always", "madvise" or "never", from
/// /sys/kernel/mm/transparent_hugepage/enabled), or "unavailable".
std::string transparent_huge_pages_mode();

/// Bytes of [addr, addr + bytes) that this process has in transparent huge pages now (the
/// AnonHugePages of the mappings it overlaps, from /proc/self/smaps; 0 when unreadable).
std::size_t huge_page_bytes(const void* addr, std::size_t bytes);

/// Wraps `upstream` with a hard capacity (bytes allocated + mapped never exceed it) and, when
/// `virtual_memory` is false, no virtual-memory support at all: it stands in for an
/// accelerator whose driver lacks it (many Ascend NPU setups), so the fallback path is real.
/// memory_info() reports the capacity and what is left of it. Named "limited:<index>".
DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory = false,
                              int index = 0);

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

// A host device whose every segment lies inside one address range reserved at start-up, so the
// LD_PRELOAD library can tell "modelmem made this pointer" from "the C library made it" with
// one comparison, without a lookup and without reading memory around the pointer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "modelmem/device/device.hpp"

namespace modelmem::preload {

/// Thread-safe (one mutex). Segments are committed with mmap(MAP_FIXED) inside the reservation
/// and decommitted (pages discarded, PROT_NONE) when returned. O(log n) in free ranges.
class RegionDevice : public device::Device {
 public:
  /// Reserves `reserve` bytes of address space (no memory), or less where the environment
  /// allows less: under an address-space limit (RLIMIT_AS, `ulimit -v`) at most half of what
  /// the limit leaves (the program needs the rest; release_unused() gives back what is not
  /// used when the C library needs it), and halving while the OS refuses. Then `adapted()`
  /// says so in a line. Throws InvalidInput naming what fits and what to set when less than
  /// 1 GiB would fit without a limit, or less than 64 MiB under one.
  /// `populate`: pages are mapped when a segment is obtained; `huge_pages`: segments of 2 MiB
  /// and more are offered to transparent huge pages (fewer faults, but a partly used segment
  /// then costs whole 2 MiB pages of resident memory).
  RegionDevice(std::size_t reserve, bool populate, bool huge_pages);
  /// "" when the reservation is what was asked for; else what was reserved instead, and why.
  const std::string& adapted() const noexcept { return adapted_; }
  std::size_t reserved() const noexcept { return size_.load(std::memory_order_relaxed); }
  /// Gives the free end of the reservation back to the OS (under RLIMIT_AS the C library can
  /// then map it): the bytes given back, 0 when the end is in use. Pointers in it are never
  /// contains()'s again.
  std::size_t release_unused() noexcept;
  /// Bytes given back by release_unused() so far.
  std::size_t released() const;
  ~RegionDevice() override;

  std::string name() const override { return "host-region:0"; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  device::MemoryInfo memory_info() const override;
  /// madvise(MADV_HUGEPAGE) on the whole 2 MiB pages of the range (one OS call, counted).
  bool prefer_large_pages(void* addr, std::size_t bytes) noexcept override;
  bool host_accessible() const noexcept override { return true; }

  bool contains(const void* p) const noexcept {
    auto a = reinterpret_cast<std::uintptr_t>(p);
    // One compare (unsigned wrap covers a < base_). Relaxed: a pointer the C library made in a
    // range given back was made after the release, which its user then saw happen before.
    return a - base_ < size_.load(std::memory_order_relaxed);
  }
  std::uint64_t os_calls() const;  ///< mmap calls made after the reservation
  std::size_t committed() const;

 private:
  std::uintptr_t base_ = 0;
  std::atomic<std::size_t> size_{0};
  std::size_t released_ = 0;
  bool populate_ = false;
  bool huge_pages_ = false;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset -> length, coalesced
  std::size_t committed_ = 0;
  std::uint64_t os_calls_ = 0;
  std::string adapted_;
};

}  // namespace modelmem::preload

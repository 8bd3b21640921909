// Devices that need no accelerator: real host memory, a capacity-limited stand-in for an
// accelerator (optionally without virtual memory), and a fault injector for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "modelmem/device.hpp"

namespace modelmem::device {

struct HostOptions {
  bool huge_pages = false;  ///< try 2 MiB pages (MAP_HUGETLB / madvise), fall back to normal pages
  bool prefault = false;    ///< MAP_POPULATE / touch pages so later use costs no page fault
};

/// Host memory from mmap/munmap; virtual memory by reserving PROT_NONE ranges and committing
/// pages with mprotect on map (and MADV_DONTNEED + PROT_NONE on unmap).
DevicePtr make_host_device(HostOptions options = {});

/// Wraps `upstream` with a hard capacity (bytes allocated + mapped never exceed it) and, when
/// `virtual_memory` is false, no virtual-memory support at all: it stands in for an
/// accelerator whose driver lacks it (many Ascend NPU setups), so the fallback path is real.
/// Named "limited:<index>".
DevicePtr make_limited_device(DevicePtr upstream, std::size_t capacity, bool virtual_memory = false,
                              int index = 0);

/// Which call of a FaultyDevice fails.
enum class FaultOp : std::uint8_t { kAllocate, kMap, kReserve };

/// Wraps `upstream`; `should_fail(op, n)` is asked before the n-th (0-based) call of each kind
/// and makes that call throw OutOfMemory when it returns true. Counts what is outstanding so a
/// test can check that everything taken was given back.
class FaultyDevice;
std::shared_ptr<FaultyDevice> make_faulty_device(
    DevicePtr upstream, std::function<bool(FaultOp op, std::uint64_t n)> should_fail);

}  // namespace modelmem::device

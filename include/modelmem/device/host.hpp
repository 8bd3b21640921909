// Host memory as a device (mmap/munmap, virtual memory through PROT_NONE reservations) and the
// transparent-huge-page helpers the planned arena and the preload use. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "modelmem/device/device.hpp"

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

/// The page faults the kernel has counted for this process so far (getrusage(RUSAGE_SELF): all
/// its threads, every kind of memory), minor and major; zeros when it cannot be read.
struct PageFaults {
  std::uint64_t minor = 0;
  std::uint64_t major = 0;
};
PageFaults process_page_faults() noexcept;

}  // namespace modelmem::device

// The LD_PRELOAD library's host device inside one reserved address range (region_device.hpp).
#include "region_device.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "modelmem/core/bytes.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::preload {
namespace {
// Segments start on 2 MiB boundaries so that transparent huge pages can back large ones.
constexpr std::size_t kGranule = 64u << 10;
constexpr std::size_t kHuge = 2u << 20;
// Less than this is not worth serving large requests from (without a limit, the OS refusing
// it means something is wrong)...
constexpr std::size_t kMinReserve = std::size_t{1} << 30;
// ...but under an address-space limit a small reservation costs the program nothing (what it
// does not use is given back when the C library needs it), where refusing to run would.
constexpr std::size_t kMinReserveUnderLimit = std::size_t{64} << 20;

// VmSize of this process (bytes), 0 when unknown.
std::size_t address_space_in_use() noexcept {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "VmSize:", 7) == 0) kib = std::strtoull(line + 7, nullptr, 10);
  std::fclose(f);
  return kib << 10;
}
}  // namespace

RegionDevice::RegionDevice(std::size_t reserve, bool populate, bool huge_pages)
    : populate_(populate), huge_pages_(huge_pages) {
  reserve = checked_align_up(reserve, kHuge, "preload reservation");
  const std::size_t requested = reserve;
  std::string why;
  std::size_t minimum = kMinReserve;
  std::size_t cap = 0, used = 0;
  struct rlimit limit {};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    cap = static_cast<std::size_t>(limit.rlim_cur);
    used = address_space_in_use();
    const std::size_t room = cap > used ? (cap - used) / 2 / kHuge * kHuge : 0;
    why = "RLIMIT_AS (ulimit -v) is " + format_bytes(cap) + ", " + format_bytes(used) +
          " of it in use";
    if (room < reserve) reserve = room;
    minimum = kMinReserveUnderLimit;
  }
  void* p = MAP_FAILED;
  while (reserve >= minimum) {
    p = mmap(nullptr, reserve + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
             0);
    if (p != MAP_FAILED) break;
    if (why.empty()) why = std::string("the OS refused more (") + std::strerror(errno) + ")";
    reserve = reserve / 2 / kHuge * kHuge;
  }
  if (p == MAP_FAILED && cap != 0) {
    // What the limit must be for the smallest reservation (half of what it leaves) to fit.
    const std::size_t needed = used + 2 * minimum + kHuge;
    throw InvalidInput("address space reservation: not even " + format_bytes(minimum) +
                       " of address space for large requests fits: " + why +
                       "; raise the limit to at least " + format_bytes(needed) + " (ulimit -v " +
                       std::to_string((needed + 1023) / 1024) +
                       "), or set strategy:system to leave every request to the C library");
  }
  if (p == MAP_FAILED)
    throw InvalidInput("address space reservation: preload_reserve_gb asks for " +
                       format_bytes(requested) + " and not even " + format_bytes(kMinReserve) +
                       " fits: " + (why.empty() ? "the OS refused it" : why) +
                       "; set strategy:system to leave every request to the C library");
  if (reserve < requested)
    adapted_ = "reserved " + format_bytes(reserve) + " of address space for large requests, not " +
               format_bytes(requested) + " (preload_reserve_gb): " + why +
               "; larger needs go to the C library, which gets what modelmem does not use "
               "when it needs it";
  // The reservation was made 2 MiB larger to align its start: the ends beyond the aligned
  // range are given back now.
  const auto start = reinterpret_cast<std::uintptr_t>(p);
  base_ = (start + kHuge - 1) / kHuge * kHuge;
  if (base_ > start) munmap(p, base_ - start);
  const std::uintptr_t end = start + reserve + kHuge;
  if (end > base_ + reserve)
    munmap(reinterpret_cast<void*>(base_ + reserve), end - base_ - reserve);
  size_.store(reserve, std::memory_order_relaxed);
  free_.emplace(0, reserve);
}

std::size_t RegionDevice::release_unused() noexcept {
  std::lock_guard lock(mutex_);
  const std::size_t size = size_.load(std::memory_order_relaxed);
  if (free_.empty()) return 0;
  auto last = std::prev(free_.end());
  if (last->first + last->second != size || last->second == 0) return 0;
  const std::size_t keep = last->first;  // a multiple of kGranule: whole pages
  if (munmap(reinterpret_cast<void*>(base_ + keep), size - keep) != 0) return 0;
  free_.erase(last);
  size_.store(keep, std::memory_order_relaxed);
  released_ += size - keep;
  os_calls_++;
  return size - keep;
}

std::size_t RegionDevice::released() const {
  std::lock_guard lock(mutex_);
  return released_;
}

RegionDevice::~RegionDevice() {
  // The process's memory may still be in use by the program after the library's statics are
  // gone; the reservation is left to the OS at exit.
}

void* RegionDevice::allocate(std::size_t bytes) {
  if (bytes == 0) throw InvalidInput("host-region: allocation of 0 bytes");
  const std::size_t align = bytes >= kHuge ? kHuge : kGranule;
  const std::size_t len = checked_align_up(bytes, kGranule, "host-region segment");
  std::size_t offset = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = free_.begin();
    for (; it != free_.end(); ++it) {
      std::size_t start = (it->first + align - 1) / align * align;
      if (start + len <= it->first + it->second) {
        offset = start;
        break;
      }
    }
    if (it == free_.end())
      throw OutOfMemory(OomInfo{bytes,
                                size_.load(std::memory_order_relaxed) - committed_,
                                committed_,
                                committed_,
                                0,
                                {},
                                "host-region (reservation exhausted)"});
    std::size_t fstart = it->first, flen = it->second;
    free_.erase(it);
    if (offset > fstart) free_.emplace(fstart, offset - fstart);
    if (offset + len < fstart + flen) free_.emplace(offset + len, fstart + flen - offset - len);
    committed_ += len;
    os_calls_++;
  }
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | (populate_ ? MAP_POPULATE : 0);
  void* addr = reinterpret_cast<void*>(base_ + offset);
  if (mmap(addr, len, PROT_READ | PROT_WRITE, flags, -1, 0) == MAP_FAILED) {
    deallocate(addr, bytes);
    throw OutOfMemory(OomInfo{bytes, 0, committed_, committed_, 0, {}, "host-region (mmap)"});
  }
  if (huge_pages_ && len >= kHuge) madvise(addr, len, MADV_HUGEPAGE);
  return addr;
}

void RegionDevice::deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::size_t len = (bytes + kGranule - 1) / kGranule * kGranule;
  // Discards the pages and makes the range inaccessible again, still reserved.
  mmap(ptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  std::lock_guard lock(mutex_);
  std::size_t offset = reinterpret_cast<std::uintptr_t>(ptr) - base_;
  committed_ -= len;
  os_calls_++;
  auto next = free_.lower_bound(offset);
  std::size_t start = offset, length = len;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == offset + len) {
    length += next->second;
    free_.erase(next);
  }
  free_.emplace(start, length);
}

bool RegionDevice::prefer_large_pages(void* addr, std::size_t bytes) noexcept {
  const bool taken = device::advise_huge_pages(addr, bytes);
  std::lock_guard lock(mutex_);
  os_calls_++;
  return taken;
}

device::MemoryInfo RegionDevice::memory_info() const {
  const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return {static_cast<std::size_t>(avail) * static_cast<std::size_t>(page),
          static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)};
}

std::uint64_t RegionDevice::os_calls() const {
  std::lock_guard lock(mutex_);
  return os_calls_;
}

std::size_t RegionDevice::committed() const {
  std::lock_guard lock(mutex_);
  return committed_;
}

}  // namespace modelmem::preload

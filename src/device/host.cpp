// Host memory from the OS. Plain allocations are private anonymous mappings; virtual memory is a
// PROT_NONE reservation whose pages are committed with mprotect and decommitted with
// MADV_DONTNEED + PROT_NONE, which is as close as the host gets to cuMemMap/cuMemUnmap.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "modelmem/core/error.hpp"
#include "modelmem/device/host.hpp"

namespace modelmem::device {
namespace {

constexpr std::size_t kHugePage = 2u << 20;

std::size_t os_page_size() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

class HostDevice final : public Device {
 public:
  explicit HostDevice(HostOptions options)
      : options_(options), page_(options.huge_pages ? kHugePage : os_page_size()) {}

  std::string name() const override { return "host:" + std::to_string(options_.index); }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) throw InvalidInput(name() + ": allocate of 0 bytes");
    const std::size_t length = mapping_length(bytes);
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    if (options_.prefault) flags |= MAP_POPULATE;
    void* p = MAP_FAILED;
    // Explicit huge pages exist only where the administrator reserved some; when they are not
    // there we fall back to normal pages and ask for transparent huge pages instead.
    if (use_hugetlb(bytes) && !hugetlb_failed_.load(std::memory_order_relaxed)) {
      p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, flags | MAP_HUGETLB, -1, 0);
      if (p == MAP_FAILED) hugetlb_failed_.store(true, std::memory_order_relaxed);
    }
    if (p == MAP_FAILED) {
      p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, -1, 0);
      if (p == MAP_FAILED) throw_oom(bytes, "mmap");
      if (options_.huge_pages) ::madvise(p, length, MADV_HUGEPAGE);
    }
    return p;
  }

  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (ptr == nullptr) return;
    ::munmap(ptr, mapping_length(bytes));
  }

  bool host_accessible() const noexcept override { return true; }
  bool prefer_large_pages(void* addr, std::size_t bytes) noexcept override {
    return advise_huge_pages(addr, bytes);
  }

  MemoryInfo memory_info() const override {
    const std::size_t page = os_page_size();
    MemoryInfo info;
    info.total = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * page;
    info.free = static_cast<std::size_t>(::sysconf(_SC_AVPHYS_PAGES)) * page;
    return info;
  }

  VmProbe probe_virtual_memory() override {
    try {
      void* p = reserve(page_);
      map(p, page_);
      unmap(p, page_);
      release(p, page_);
      return {true, ""};
    } catch (const std::exception& e) {
      return {false, e.what()};
    }
  }

  std::size_t granularity() const override { return page_; }

  void* reserve(std::size_t bytes) override {
    check_multiple(bytes, "reserve size");
    if (bytes == 0) throw InvalidInput(name() + ": reserve of 0 bytes");
    // Over-reserve so the base can be aligned to the granularity (2 MiB with huge pages), then
    // give the slack back.
    const std::size_t slack = page_ > os_page_size() ? page_ : 0;
    const std::size_t length = checked_add(bytes, slack, "reserve size");
    void* p =
        ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw_oom(bytes, "reserve");
    auto base = reinterpret_cast<std::uintptr_t>(p);
    auto aligned = (base + page_ - 1) / page_ * page_;
    if (aligned > base) ::munmap(p, aligned - base);
    const auto end = base + length;
    if (end > aligned + bytes)
      ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
    return reinterpret_cast<void*>(aligned);
  }

  void release(void* base, std::size_t bytes) noexcept override {
    if (base != nullptr && bytes != 0) ::munmap(base, bytes);
  }

  void map(void* addr, std::size_t bytes) override {
    check_multiple(reinterpret_cast<std::uintptr_t>(addr), "map address");
    check_multiple(bytes, "map size");
    if (::mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) throw_oom(bytes, "mprotect");
    if (options_.huge_pages) ::madvise(addr, bytes, MADV_HUGEPAGE);
    if (options_.prefault) prefault(addr, bytes);
  }

  void unmap(void* addr, std::size_t bytes) noexcept override {
    // DONTNEED drops the pages (the next map sees zeros and costs page faults again);
    // PROT_NONE turns a later stray access into a crash instead of silent reuse.
    ::madvise(addr, bytes, MADV_DONTNEED);
    ::mprotect(addr, bytes, PROT_NONE);
  }

 private:
  bool use_hugetlb(std::size_t bytes) const {
    return options_.huge_pages && bytes % kHugePage == 0;
  }
  std::size_t mapping_length(std::size_t bytes) const {
    const std::size_t unit = use_hugetlb(bytes) ? kHugePage : os_page_size();
    return checked_align_up(bytes, unit, "host allocation");
  }
  void check_multiple(std::size_t value, const char* what) const {
    if (value % page_ != 0)
      throw InvalidInput(name() + ": " + what + " " + std::to_string(value) +
                         " is not a multiple of the granularity " + std::to_string(page_));
  }

  void prefault(void* addr, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (::madvise(addr, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
    // Older kernels: touch one byte per OS page (the memory is fresh, so writing zero is safe).
    auto* p = static_cast<volatile char*>(addr);
    for (std::size_t off = 0; off < bytes; off += os_page_size()) p[off] = 0;
  }

  [[noreturn]] void throw_oom(std::size_t bytes, const char* call) const {
    const int err = errno;
    OomInfo info;
    info.requested = bytes;
    info.device_free = memory_info().free;
    info.where = name();
    throw OutOfMemory(info, describe(info) + " (" + call + ": " + std::strerror(err) + ")");
  }

  HostOptions options_;
  std::size_t page_;
  std::atomic<bool> hugetlb_failed_{false};
};

}  // namespace

DevicePtr make_host_device(HostOptions options) {
  return std::make_shared<HostDevice>(options);
}

bool advise_huge_pages(void* addr, std::size_t bytes) noexcept {
#ifdef MADV_HUGEPAGE
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes > UINTPTR_MAX - begin) return false;
  const std::uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const std::uintptr_t last = (begin + bytes) / kHugePage * kHugePage;
  if (last <= first) return false;
  return ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) == 0;
#else
  (void)addr;
  (void)bytes;
  return false;
#endif
}

std::string transparent_huge_pages_mode() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
  if (f == nullptr) return "unavailable";
  char line[128] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  // e.g. "always [madvise] never": the bracketed word is the mode in force.
  const char* open = read ? std::strchr(line, '[') : nullptr;
  const char* close = open ? std::strchr(open, ']') : nullptr;
  if (close == nullptr) return "unavailable";
  return std::string(open + 1, close);
}

std::size_t huge_page_bytes(const void* addr, std::size_t bytes) {
  std::FILE* f = std::fopen("/proc/self/smaps", "re");
  if (f == nullptr) return 0;
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t end = begin + bytes;
  std::size_t total = 0;
  bool inside = false;     // the mapping whose lines are being read overlaps the range
  bool line_start = true;  // the buffer begins a line (a long path comes in several pieces)
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const bool whole = std::strchr(line, '\n') != nullptr;
    unsigned long lo = 0, hi = 0;
    unsigned long kb = 0;
    // A mapping's first line is "lo-hi perms ...", its fields "Name:   value kB"; the rest of
    // a long path is neither.
    if (line_start && std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
      inside = lo < end && hi > begin;
    else if (line_start && inside && std::sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
      total += static_cast<std::size_t>(kb) * 1024;
    line_start = whole;
  }
  std::fclose(f);
  return total;
}

PageFaults process_page_faults() noexcept {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return {};
  return {static_cast<std::uint64_t>(ru.ru_minflt), static_cast<std::uint64_t>(ru.ru_majflt)};
}

}  // namespace modelmem::device

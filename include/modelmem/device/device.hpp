// Where bytes come from. A Device hands out memory segments and, optionally, lets a caller
// reserve address space and map physical memory into it on demand (what "expandable segments"
// need). Strategies never know which device they sit on. Implementations must be thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace modelmem::device {

struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

/// Result of probing a device for virtual-memory support.
struct VmProbe {
  bool supported = false;
  std::string reason;  ///< why not, when unsupported (e.g. "no virtual memory")
};

class Device {
 public:
  virtual ~Device() = default;

  /// Short name used in messages and statistics, e.g. "host:0", "limited:0", "cuda:0".
  virtual std::string name() const = 0;

  /// Returns `bytes` of memory; throws OutOfMemory when the device has none left.
  virtual void* allocate(std::size_t bytes) = 0;
  /// Returns memory from allocate(); `bytes` is the size that was asked for.
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;

  virtual MemoryInfo memory_info() const = 0;
  /// Device memory one allocate() takes beyond the bytes asked for (the runtime's padding and
  /// the alignment slack): a request of memory_info().total - allocation_overhead() is the
  /// largest an empty device can give. 0 by default.
  virtual std::size_t allocation_overhead() const noexcept { return 0; }

  /// Asks for [addr, addr + bytes) of memory from allocate() to be backed by large pages where
  /// the device has them (host: transparent huge pages, madvise(MADV_HUGEPAGE)). A hint: true
  /// when the device passed it on, false where it has no such thing (the default). Only the
  /// whole large pages inside the range can be backed by them.
  virtual bool prefer_large_pages(void* addr, std::size_t bytes) noexcept;

  /// Whether the CPU may read and write the memory allocate() returns (host memory: true).
  /// false (the default) for device memory (CUDA, Ascend) and for address space that must not
  /// be touched (the sizing layer's): a strategy then never writes to it itself, as the planned
  /// arena's prefault would.
  virtual bool host_accessible() const noexcept { return false; }

  // ---- optional virtual-memory operations (all throw Unsupported by default) ----

  /// Tries a tiny reservation; never throws.
  virtual VmProbe probe_virtual_memory();
  /// Page size for reserve/map; every size and address passed below is a multiple of it.
  virtual std::size_t granularity() const;
  /// Reserves address space without physical memory.
  virtual void* reserve(std::size_t bytes);
  virtual void release(void* base, std::size_t bytes) noexcept;
  /// Backs [addr, addr + bytes) with physical memory; throws OutOfMemory when none is left
  /// (and leaves nothing mapped from this call).
  virtual void map(void* addr, std::size_t bytes);
  virtual void unmap(void* addr, std::size_t bytes) noexcept;
};

using DevicePtr = std::shared_ptr<Device>;

}  // namespace modelmem::device

// The per-device stacks of a pluggable allocator library (libmodelmem_cuda_alloc.so,
// libmodelmem_npu_alloc.so): one slot per device index, whose stack is built once, on the first
// request for that device, from the library's configuration, then published for `modelmem
// info` / `top` and relayed to the library's C listeners. Queries (statistics, trim, the peak)
// look at a built stack only and never build one. Thread-safe; a table is meant to live for the
// whole process (the libraries never destroy theirs: frameworks free memory during exit).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/config/config.hpp"
#include "modelmem/config/listeners.hpp"
#include "modelmem/device/device.hpp"
#include "modelmem/monitor/publisher.hpp"

namespace modelmem::config {

class DeviceSlots {
 public:
  static constexpr int kMaxDevices = 64;

  /// The configuration of one device's stack and where it came from ("MODELMEM_ALLOC_CONF",
  /// "defaults", ...), for the MODELMEM_VERBOSE=1 line.
  struct Configured {
    Config config;
    std::string source;
  };
  struct Options {
    std::string kind;       ///< "cuda", "npu": devices are named "cuda:0", ...
    std::string pool_name;  ///< the default pool name it publishes ("pytorch", "npu")
    std::function<Configured(int device)> configure;           ///< may throw (InvalidInput)
    std::function<device::DevicePtr(int device)> make_device;  ///< may throw
  };

  explicit DeviceSlots(Options options);
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  /// The stack of `device`, built on first use (a failed build is said once on stderr, and
  /// then every time by the exception). Throws InvalidInput for an index out of [0, 64) and
  /// Error with the reason the stack could not be built.
  alloc::Allocator& get(int device);
  /// The stack of `device` when it is built already, else nullptr (out-of-range indices too).
  alloc::Allocator* built(int device) const noexcept;
  /// What the libraries' stats functions (modelmem_cuda_stats, modelmem_npu_stats) fill: up to
  /// `n` of [reserved, allocated, peak reserved, peak allocated, device allocations, OOMs] of
  /// `device`'s built stack. Returns how many it filled, or -1 when the device has no stack yet
  /// (a query never builds one) or `out` is null.
  int stats(int device, unsigned long long* out, int n) const noexcept;
  /// The listeners of every device's events (the library's add/remove_listener functions).
  ListenerRegistry& listeners() noexcept { return listeners_; }

 private:
  struct Slot {
    std::once_flag once;
    std::shared_ptr<alloc::Allocator> allocator;  // set once by build(), then read-only
    std::atomic<bool> ready{false};
    std::string error;
    std::vector<monitor::PoolRegistration> registrations;
    std::unique_ptr<EventRelay> relay;
  };
  void build(Slot& slot, int device);

  Options options_;
  ListenerRegistry listeners_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace modelmem::config

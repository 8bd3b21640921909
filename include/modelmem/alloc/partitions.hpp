// Per-model partitions: one device's budget split among named pools, each with a guaranteed
// share. A pool's allocator never takes memory from another pool: each pool sits on its own
// capacity-limited view of the device (or its own static arena), and a QuotaAdaptor in front
// refuses requests over its quota with QuotaExceeded naming the pool, quota and use.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "modelmem/alloc/allocator.hpp"
#include "modelmem/alloc/caching_allocator.hpp"
#include "modelmem/alloc/quota_adaptor.hpp"
#include "modelmem/device/device.hpp"

namespace modelmem::alloc {

/// One named pool: an explicit size, or a weighted share of what explicit sizes leave.
struct PoolSpec {
  std::string name;
  std::size_t bytes = 0;  ///< explicit quota; 0 = a share of the rest by weight
  double weight = 1.0;    ///< share of the budget left after explicit sizes

  /// A pool sized from a plan file (arena_bytes + weights_bytes) x safety_factor.
  static PoolSpec from_plan(std::string name, const std::string& plan_path,
                            double safety_factor = 1.0);
  /// Equal shares for every name.
  static std::vector<PoolSpec> equal(const std::vector<std::string>& names);
};

enum class PoolBacking {
  kStatic,   ///< each pool takes its whole quota up front as one static arena (guaranteed)
  kCaching,  ///< each pool is a caching pool on a capacity-limited view of the device
};

struct PartitionOptions {
  std::size_t budget = 0;  ///< bytes to split; 0 = the device's free memory at construction
  PoolBacking backing = PoolBacking::kStatic;
  CachingOptions caching;  ///< for kCaching (expandable segments when the device has them)
};

/// Thread-safe: pools are independent allocators; the set of pools is fixed at construction.
class Partitions {
 public:
  /// Throws InvalidInput for no pools, duplicate or empty names, explicit sizes beyond the
  /// budget, a pool whose share rounds to 0, or a budget beyond the device's free memory.
  Partitions(device::DevicePtr device, std::vector<PoolSpec> pools, PartitionOptions options = {});
  ~Partitions();
  Partitions(const Partitions&) = delete;
  Partitions& operator=(const Partitions&) = delete;

  /// The pool's allocator (a QuotaAdaptor); InvalidInput for an unknown name.
  Allocator& pool(std::string_view name);
  std::shared_ptr<QuotaAdaptor> pool_ptr(std::string_view name);

  struct PoolReport {
    std::string name;
    std::size_t quota = 0;
    std::size_t used = 0;
    std::size_t peak_used = 0;
    Stats stats;
  };
  std::vector<PoolReport> report() const;
  std::vector<std::string> names() const;
  std::size_t budget() const noexcept;

  /// Events of every pool, with Event::pool = the pool's index in construction order.
  /// nullptr removes it. The caller keeps the listener alive until removed.
  void set_listener(Listener* listener);
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelmem::alloc

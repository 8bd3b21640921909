// Splitting happens once, at construction; after that each pool is an independent stack
// (device view -> strategy -> quota), so pools share no lock and no memory.
#include "modelmem/alloc/partitions.hpp"

#include <atomic>
#include <cmath>
#include <set>

#include "modelmem/alloc/static_allocator.hpp"
#include "modelmem/core/error.hpp"
#include "modelmem/device/limited.hpp"
#include "modelmem/plan/plan_file.hpp"

namespace modelmem::alloc {
namespace {

constexpr std::size_t kAlign = 256;

}  // namespace

PoolSpec PoolSpec::from_plan(std::string name, const std::string& plan_path, double safety_factor) {
  if (!(safety_factor >= 1.0 && safety_factor <= 100.0))
    throw InvalidInput("pool '" + name + "': safety factor must be in [1, 100]");
  plan::PlanSizes plan = plan::read_plan_sizes(plan_path);
  double bytes = std::ceil(static_cast<double>(plan.total()) * safety_factor);
  if (!(bytes < 1.8e19)) throw InvalidInput(plan_path + ": pool size overflows 64 bits");
  PoolSpec spec;
  spec.name = std::move(name);
  spec.bytes = static_cast<std::size_t>(bytes);
  if (spec.bytes == 0)
    throw InvalidInput(plan_path + ": arena_bytes + weights_bytes is 0, no pool to size");
  return spec;
}

std::vector<PoolSpec> PoolSpec::equal(const std::vector<std::string>& names) {
  std::vector<PoolSpec> out;
  for (const auto& n : names) out.push_back(PoolSpec{n, 0, 1.0});
  return out;
}

struct Partitions::Impl {
  struct Pool {
    std::string name;
    std::size_t quota = 0;
    std::shared_ptr<Allocator> inner;
    std::shared_ptr<QuotaAdaptor> outer;
    std::unique_ptr<PoolRelay> relay;
  };
  device::DevicePtr device;
  PartitionOptions options;
  std::size_t budget = 0;
  std::vector<Pool> pools;
  std::atomic<Listener*> listener{nullptr};

  const Pool& find(std::string_view name) const {
    for (const auto& p : pools)
      if (p.name == name) return p;
    throw InvalidInput("partitions: no pool named '" + std::string(name) + "'");
  }
};

Partitions::Partitions(device::DevicePtr device, std::vector<PoolSpec> specs,
                       PartitionOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!device) throw InvalidInput("partitions: no device");
  if (specs.empty()) throw InvalidInput("partitions: no pools");
  Impl& m = *impl_;
  m.device = device;
  m.options = options;
  const std::size_t device_free = device->memory_info().free;
  m.budget = options.budget == 0 ? device_free : options.budget;
  m.budget -= m.budget % kAlign;
  if (m.budget > device_free)
    throw InvalidInput("partitions: budget of " + format_bytes(m.budget) + " exceeds the " +
                       format_bytes(device_free) + " free on " + device->name());

  std::set<std::string> seen;
  std::size_t explicit_total = 0;
  double weight_total = 0;
  for (const auto& s : specs) {
    if (s.name.empty()) throw InvalidInput("partitions: a pool has an empty name");
    if (!seen.insert(s.name).second)
      throw InvalidInput("partitions: pool '" + s.name + "' is named twice");
    if (s.bytes > 0) {
      explicit_total = checked_add(explicit_total, checked_align_up(s.bytes, kAlign, "pool size"),
                                   "partitions: sum of pool sizes");
    } else {
      if (!(s.weight > 0.0) || !std::isfinite(s.weight))
        throw InvalidInput("partitions: pool '" + s.name +
                           "' has neither a size nor a positive weight");
      weight_total += s.weight;
    }
  }
  if (explicit_total > m.budget)
    throw InvalidInput("partitions: pools ask for " + format_bytes(explicit_total) +
                       ", more than the budget of " + format_bytes(m.budget));
  const std::size_t rest = m.budget - explicit_total;

  std::uint32_t index = 0;
  for (const auto& s : specs) {
    Impl::Pool pool;
    pool.name = s.name;
    if (s.bytes > 0) {
      pool.quota = checked_align_up(s.bytes, kAlign, "pool size");
    } else {
      double share = std::floor(static_cast<double>(rest) * (s.weight / weight_total));
      pool.quota = static_cast<std::size_t>(share);
      pool.quota -= pool.quota % kAlign;
      if (pool.quota == 0)
        throw InvalidInput("partitions: pool '" + s.name + "' gets 0 bytes of the " +
                           format_bytes(rest) + " left after explicit sizes");
    }
    if (options.backing == PoolBacking::kStatic) {
      pool.inner = std::make_shared<StaticAllocator>(device, StaticOptions{pool.quota, kAlign});
    } else {
      CachingOptions co = options.caching;
      bool vm = co.expandable_segments && device->probe_virtual_memory().supported;
      co.expandable_segments = vm;
      // The pool's own view of the device: it can never take more than its quota from it.
      auto view = device::make_limited_device(device, pool.quota, vm, static_cast<int>(index));
      pool.inner = std::make_shared<CachingAllocator>(view, co);
    }
    QuotaOptions q;
    q.name = s.name;
    q.quota = pool.quota;
    q.granularity = kAlign;
    q.device = device;
    pool.outer = std::make_shared<QuotaAdaptor>(pool.inner, q);
    pool.relay = std::make_unique<PoolRelay>(&m.listener, index);
    m.pools.push_back(std::move(pool));
    ++index;
  }
}

Partitions::~Partitions() {
  for (auto& p : impl_->pools) p.outer->set_listener(nullptr);
}

Allocator& Partitions::pool(std::string_view name) {
  return *impl_->find(name).outer;
}

std::shared_ptr<QuotaAdaptor> Partitions::pool_ptr(std::string_view name) {
  return impl_->find(name).outer;
}

std::vector<Partitions::PoolReport> Partitions::report() const {
  std::vector<PoolReport> out;
  for (const auto& p : impl_->pools)
    out.push_back(
        PoolReport{p.name, p.quota, p.outer->used(), p.outer->peak_used(), p.outer->stats()});
  return out;
}

std::vector<std::string> Partitions::names() const {
  std::vector<std::string> out;
  for (const auto& p : impl_->pools) out.push_back(p.name);
  return out;
}

std::size_t Partitions::budget() const noexcept {
  return impl_->budget;
}

void Partitions::set_listener(Listener* listener) {
  impl_->listener.store(listener, std::memory_order_release);
  // The quota reports the block events, and passes the relay on to its pool for the rest.
  for (auto& p : impl_->pools) p.outer->set_listener(listener ? p.relay.get() : nullptr);
}

std::string Partitions::describe() const {
  std::string s =
      "partitions of " + format_bytes(impl_->budget) + " on " + impl_->device->name() + ":";
  for (const auto& p : impl_->pools) s += " " + p.name + "=" + format_bytes(p.quota);
  s += impl_->options.backing == PoolBacking::kStatic ? " (static arenas)" : " (caching pools)";
  return s;
}

}  // namespace modelmem::alloc
